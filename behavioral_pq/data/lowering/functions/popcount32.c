#include <stdint.h>

int32_t popcount32(uint32_t x) {
  int32_t count = 0;
  while (x) {
    x &= x - 1;
    count++;
  }
  return count;
}
