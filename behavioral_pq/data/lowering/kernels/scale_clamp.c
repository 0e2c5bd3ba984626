#include <stdint.h>

void scale_clamp(int64_t n, int16_t *restrict out, const int32_t *restrict in) {
  for (int64_t i = 0; i < n; i++) {
    int32_t v = in[i] * 3 / 2;
    out[i] = (int16_t)(v > 255 ? 255 : (v < -255 ? -255 : v));
  }
}
