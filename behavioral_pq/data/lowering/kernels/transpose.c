#include <stdint.h>

void transpose(int64_t n, float *restrict out, const float *restrict in) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) out[j * n + i] = in[i * n + j];
}
