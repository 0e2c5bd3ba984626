#include <stdint.h>

void histogram(int64_t n, int32_t *restrict bins, const uint32_t *restrict values) {
  for (int64_t b = 0; b < 64; b++) bins[b] = 0;
  for (int64_t i = 0; i < n; i++) bins[values[i] & 63u]++;
}
