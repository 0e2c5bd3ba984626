#include <stdint.h>

uint32_t rotate_left(uint32_t x, int32_t r) {
  r &= 31;
  return r == 0 ? x : (x << r) | (x >> (32 - r));
}
