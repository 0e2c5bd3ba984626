#include <stdint.h>

double poly_eval(const double *c, int32_t n, double x) {
  double r = 0.0;
  for (int32_t i = n - 1; i >= 0; i--) r = r * x + c[i];
  return r;
}
