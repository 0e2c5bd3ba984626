#include <stdint.h>

void matmul(int64_t n, double *restrict c, const double *restrict a, const double *restrict b) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) c[i * n + j] = 0.0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < n; k++) {
      double aik = a[i * n + k];
      for (int64_t j = 0; j < n; j++) c[i * n + j] += aik * b[k * n + j];
    }
}
