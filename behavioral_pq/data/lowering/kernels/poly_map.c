#include <stdint.h>

void poly_map(int64_t n, float *restrict out, const float *restrict x) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    out[i] = ((0.5f * v - 1.25f) * v + 2.0f) * v - 0.75f;
  }
}
