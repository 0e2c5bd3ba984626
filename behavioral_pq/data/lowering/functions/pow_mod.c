#include <stdint.h>

uint64_t pow_mod(uint64_t base, uint64_t exp, uint64_t mod) {
  uint64_t result = 1 % mod;
  base %= mod;
  while (exp) {
    if (exp & 1) result = (uint64_t)((__uint128_t)result * base % mod);
    base = (uint64_t)((__uint128_t)base * base % mod);
    exp >>= 1;
  }
  return result;
}
