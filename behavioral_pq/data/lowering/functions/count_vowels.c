#include <stdint.h>

int32_t count_vowels(const char *s) {
  int32_t count = 0;
  for (; *s; s++) {
    switch (*s | 0x20) {
    case 'a': case 'e': case 'i': case 'o': case 'u':
      count++;
      break;
    default:
      break;
    }
  }
  return count;
}
