#include <stdint.h>

void gather(int64_t n, double *restrict out, const double *restrict table, const uint32_t *restrict index) {
  for (int64_t i = 0; i < n; i++) out[i] = table[index[i] % (uint64_t)n];
}
