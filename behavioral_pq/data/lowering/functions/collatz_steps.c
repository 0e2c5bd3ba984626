#include <stdint.h>

int32_t collatz_steps(int64_t n) {
  int32_t steps = 0;
  while (n > 1) {
    n = (n % 2 == 0) ? n / 2 : 3 * n + 1;
    steps++;
  }
  return steps;
}
