#include <stdint.h>

void matvec(int64_t n, double *restrict y, const double *restrict m, const double *restrict x) {
  for (int64_t i = 0; i < n; i++) {
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += m[i * n + j] * x[j];
    y[i] = s;
  }
}
