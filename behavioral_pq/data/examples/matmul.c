/* Dense matrix multiply and a checksum: nested loops, floating point. */
#include <stdio.h>

#define N 24

static void matmul(double c[N][N], double a[N][N], double b[N][N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0.0;
      for (int k = 0; k < N; k++) acc += a[i][k] * b[k][j];
      c[i][j] = acc;
    }
}

int main(void) {
  static double a[N][N], b[N][N], c[N][N];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      a[i][j] = (i + 1) * 0.5 - j;
      b[i][j] = (i == j) ? 2.0 : 0.25 * (j - i);
    }
  matmul(c, a, b);
  double checksum = 0.0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) checksum += c[i][j] * (1 + (i ^ j) % 5);
  printf("%.3f\n", checksum);
  return 0;
}
