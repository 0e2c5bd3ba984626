#include <stdint.h>

int64_t count_above(int64_t n, const float *restrict a) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++) count += a[i] > 0.25f;
  return count;
}
