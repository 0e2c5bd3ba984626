#include <stdint.h>

void insertion_sort(int32_t *a, int32_t n) {
  for (int32_t i = 1; i < n; i++) {
    int32_t v = a[i], j = i - 1;
    while (j >= 0 && a[j] > v) {
      a[j + 1] = a[j];
      j--;
    }
    a[j + 1] = v;
  }
}
