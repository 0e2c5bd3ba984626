#include <stdint.h>

void running_sum(int64_t n, int64_t *restrict out, const int32_t *restrict in) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; i++) {
    s += in[i];
    out[i] = s;
  }
}
