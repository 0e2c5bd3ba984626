#include <stdint.h>

int32_t count_primes(int32_t n) {
  int32_t count = 0;
  for (int32_t k = 2; k <= n; k++) {
    int32_t prime = 1;
    for (int32_t d = 2; d * d <= k; d++) {
      if (k % d == 0) {
        prime = 0;
        break;
      }
    }
    count += prime;
  }
  return count;
}
