#include <stdint.h>

void complex_mul(int64_t n, float *restrict out, const float *restrict a, const float *restrict b) {
  for (int64_t i = 0; i < n / 2; i++) {
    float ar = a[2 * i], ai = a[2 * i + 1], br = b[2 * i], bi = b[2 * i + 1];
    out[2 * i] = ar * br - ai * bi;
    out[2 * i + 1] = ar * bi + ai * br;
  }
}
