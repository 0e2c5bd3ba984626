#include <stdint.h>

int64_t clamp_sum(const int32_t *a, int32_t n, int32_t lo, int32_t hi) {
  int64_t sum = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t v = a[i] < lo ? lo : (a[i] > hi ? hi : a[i]);
    sum += v;
  }
  return sum;
}
