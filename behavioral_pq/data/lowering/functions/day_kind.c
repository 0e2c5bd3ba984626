#include <stdint.h>

int32_t day_kind(int32_t day) {
  switch (day) {
  case 0: return 10;
  case 1: case 2: case 3: return 21;
  case 4: return 33;
  case 5: return 47;
  case 6: return 58;
  default: return -1;
  }
}
