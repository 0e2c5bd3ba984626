#include <stdint.h>

void xorshift_fill(int64_t n, uint64_t *restrict out, const uint64_t *restrict seed) {
  uint64_t x = seed[0] | 1u;
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = x;
  }
}
