#include <stdint.h>

void conv5(int64_t n, float *restrict out, const float *restrict in) {
  for (int64_t i = 0; i < n; i++) out[i] = 0.0f;
  for (int64_t i = 2; i < n - 2; i++)
    out[i] = 0.1f * in[i - 2] + 0.2f * in[i - 1] + 0.4f * in[i] + 0.2f * in[i + 1] + 0.1f * in[i + 2];
}
