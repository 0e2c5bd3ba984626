/* Sum of an array: one loop, one helper. */
#include <stdio.h>

static int sum(const int *a, int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += a[i];
  return s;
}

int main(void) {
  int a[64];
  for (int i = 0; i < 64; i++) a[i] = i * 3 - 7;
  printf("%d\n", sum(a, 64));
  return 0;
}
