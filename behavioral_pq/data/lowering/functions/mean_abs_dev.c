#include <stdint.h>

double mean_abs_dev(const double *a, int32_t n) {
  double mean = 0.0;
  for (int32_t i = 0; i < n; i++) mean += a[i];
  mean /= n;
  double dev = 0.0;
  for (int32_t i = 0; i < n; i++) dev += a[i] > mean ? a[i] - mean : mean - a[i];
  return dev / n;
}
