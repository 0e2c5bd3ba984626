#include <stdint.h>

double newton_sqrt(double x) {
  if (x <= 0.0) return 0.0;
  double r = x > 1.0 ? x : 1.0;
  for (int i = 0; i < 60; i++) r = 0.5 * (r + x / r);
  return r;
}
