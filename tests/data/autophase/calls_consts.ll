; Quirks: duplicate br edges, i1 constants, freeze is not unary, calls whose type differs from the callee's
; do not count in returnInt, a ConstantExpr operand makes a binary op "constant-argument".
@g = global i32 0

declare i32 @callee(i32)
declare i8 @byte()

define i64 @q(i1 %c, i32 %x) {
entry:
  br i1 %c, label %next, label %next
next:
  %s = select i1 true, i32 %x, i32 7
  %f = freeze i32 %s
  %r = call i32 @callee(i32 %f)
  %b = call i8 @byte()
  %w = call i64 @callee(i32 1)
  %p = ptrtoint ptr @g to i64
  %a = add i64 %p, ptrtoint (ptr @g to i64)
  %m = mul i64 %a, -1
  ret i64 %m
}
