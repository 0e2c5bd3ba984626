#include <stdint.h>

int64_t dot_i16(int64_t n, const int16_t *restrict a, const int16_t *restrict b) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; i++) s += (int32_t)a[i] * b[i];
  return s;
}
