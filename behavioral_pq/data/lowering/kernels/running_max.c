#include <stdint.h>

void running_max(int64_t n, float *restrict out, const float *restrict in) {
  float m = in[0];
  for (int64_t i = 0; i < n; i++) {
    m = in[i] > m ? in[i] : m;
    out[i] = m;
  }
}
