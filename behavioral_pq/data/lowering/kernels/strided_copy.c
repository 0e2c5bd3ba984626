#include <stdint.h>

void strided_copy(int64_t n, int64_t *restrict out, const int64_t *restrict in) {
  for (int64_t i = 0; i < n / 4; i++) {
    out[4 * i] = in[i];
    out[4 * i + 1] = in[n - 1 - i];
    out[4 * i + 2] = in[i] ^ in[n - 1 - i];
    out[4 * i + 3] = 0;
  }
}
