#include <stdint.h>

void prefix_sum(int64_t *a, int32_t n) {
  for (int32_t i = 1; i < n; i++) a[i] += a[i - 1];
}
