#include <stdint.h>

void vec_add_i32(int64_t n, int32_t *restrict c, const int32_t *restrict a, const int32_t *restrict b) {
  for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}
