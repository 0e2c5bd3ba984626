#include <stdint.h>

int64_t sum_i64(int64_t n, const int32_t *restrict a) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i];
  return s;
}
