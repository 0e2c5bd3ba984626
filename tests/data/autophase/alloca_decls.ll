; Quirks: the implicit `i32 1` array size of alloca is a constant operand; declarations count as functions.
declare i32 @ext(i32)
declare void @llvm.donothing()

define i32 @f() {
entry:
  %a = alloca i32
  store i32 0, ptr %a
  %v = load i32, ptr %a
  ret i32 %v
}
