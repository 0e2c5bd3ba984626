/* A tokenizer state machine: a switch in a loop, byte tests, a small table. */
#include <stdio.h>
#include <string.h>

enum state { START, WORD, NUMBER, SPACE };

static int classify(char c) {
  if (c >= '0' && c <= '9') return NUMBER;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return WORD;
  return SPACE;
}

static void count_tokens(const char *text, int counts[4]) {
  enum state s = START;
  for (size_t i = 0, n = strlen(text); i < n; i++) {
    int k = classify(text[i]);
    switch (s) {
      case START:
      case SPACE:
        if (k != SPACE) counts[k]++;
        s = (enum state)k;
        break;
      case WORD:
        if (k == SPACE) s = SPACE;
        break;
      case NUMBER:
        if (k == WORD) { counts[WORD]++; s = WORD; }
        else if (k == SPACE) s = SPACE;
        break;
    }
  }
}

int main(void) {
  int counts[4] = {0, 0, 0, 0};
  count_tokens("let x1 = 42 + y_2 * 7; print x1 99 bottles", counts);
  printf("words=%d numbers=%d\n", counts[WORD], counts[NUMBER]);
  return 0;
}
