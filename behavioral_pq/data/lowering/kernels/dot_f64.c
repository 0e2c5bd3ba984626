#include <stdint.h>

double dot_f64(int64_t n, const double *restrict a, const double *restrict b) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
