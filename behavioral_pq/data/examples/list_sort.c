/* Insertion sort of a linked list allocated from a pool: pointers, structs, calls. */
#include <stdio.h>

struct node { int key; struct node *next; };

static struct node pool[128];

static struct node *insert_sorted(struct node *head, struct node *n) {
  if (!head || n->key < head->key) { n->next = head; return n; }
  struct node *cur = head;
  while (cur->next && cur->next->key <= n->key) cur = cur->next;
  n->next = cur->next;
  cur->next = n;
  return head;
}

int main(void) {
  struct node *head = 0;
  unsigned x = 12345u;
  for (int i = 0; i < 128; i++) {
    x = x * 1103515245u + 12345u;
    pool[i].key = (int)((x >> 16) % 1000);
    head = insert_sorted(head, &pool[i]);
  }
  long checksum = 0;
  int i = 0;
  for (struct node *n = head; n; n = n->next) checksum += (long)n->key * ++i;
  printf("%ld\n", checksum);
  return 0;
}
