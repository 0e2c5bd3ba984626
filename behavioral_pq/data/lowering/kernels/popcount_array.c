#include <stdint.h>

void popcount_array(int64_t n, int32_t *restrict out, const uint32_t *restrict in) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t x = in[i];
    int32_t c = 0;
    while (x) {
      x &= x - 1;
      c++;
    }
    out[i] = c;
  }
}
