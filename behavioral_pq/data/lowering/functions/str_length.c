#include <stdint.h>

int64_t str_length(const char *s) {
  const char *p = s;
  while (*p) p++;
  return p - s;
}
