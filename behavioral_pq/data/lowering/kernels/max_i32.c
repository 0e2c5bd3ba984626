#include <stdint.h>

int32_t max_i32(int64_t n, const int32_t *restrict a) {
  int32_t m = INT32_MIN;
  for (int64_t i = 0; i < n; i++) m = a[i] > m ? a[i] : m;
  return m;
}
