#include <stdint.h>

int64_t max_subarray(const int32_t *a, int32_t n) {
  int64_t best = a[0], current = a[0];
  for (int32_t i = 1; i < n; i++) {
    current = current + a[i] > a[i] ? current + a[i] : a[i];
    if (current > best) best = current;
  }
  return best;
}
