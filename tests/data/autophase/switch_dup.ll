; Quirks: a switch with three cases to one block counts 3 successors, 3 predecessors and 3 critical edges.
define i32 @sw(i32 %x) {
entry:
  switch i32 %x, label %other [
    i32 1, label %same
    i32 2, label %same
    i32 3, label %same
  ]
same:
  br label %exit
other:
  br label %exit
exit:
  %r = phi i32 [ 10, %same ], [ 20, %other ]
  ret i32 %r
}
