#include <stdint.h>

void saxpy(int64_t n, float *restrict y, const float *restrict x) {
  for (int64_t i = 0; i < n; i++) y[i] += 2.5f * x[i];
}
