#include <stdint.h>

void stencil3(int64_t n, double *restrict out, const double *restrict in) {
  out[0] = in[0];
  out[n - 1] = in[n - 1];
  for (int64_t i = 1; i < n - 1; i++) out[i] = 0.25 * in[i - 1] + 0.5 * in[i] + 0.25 * in[i + 1];
}
