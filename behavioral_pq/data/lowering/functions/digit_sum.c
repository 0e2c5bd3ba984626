#include <stdint.h>

int32_t digit_sum(int64_t n) {
  uint64_t u = n < 0 ? 0 - (uint64_t)n : (uint64_t)n;
  int32_t sum = 0;
  do {
    sum += (int32_t)(u % 10);
    u /= 10;
  } while (u);
  return sum;
}
