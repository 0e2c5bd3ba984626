#include <stdint.h>

void reverse_array(int32_t *a, int32_t n) {
  for (int32_t i = 0, j = n - 1; i < j; i++, j--) {
    int32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}
