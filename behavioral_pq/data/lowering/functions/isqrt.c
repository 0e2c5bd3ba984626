#include <stdint.h>

uint64_t isqrt(uint64_t x) {
  uint64_t lo = 0, hi = x < 2 ? x : (x / 2 < 4294967295u ? x / 2 : 4294967295u);
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (mid * mid <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
