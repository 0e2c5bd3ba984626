#include <stdint.h>

uint32_t sad_u8(int64_t n, const uint8_t *restrict a, const uint8_t *restrict b) {
  uint32_t s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
  return s;
}
