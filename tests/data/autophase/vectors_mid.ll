; Quirks: vector splats and FP constants are not ConstantInt, fadd is a binary op, fneg and casts are unary,
; a block of 16 instructions is BlockMid.
declare void @llvm.donothing()

define <2 x i32> @vec(<2 x i32> %v, double %d, ptr %p, i16 %h) {
entry:
  %a = add <2 x i32> %v, <i32 1, i32 1>
  %f = fadd double %d, 1.0
  %z = zext i16 %h to i32
  %s = sext i16 %h to i64
  %t = trunc i64 %s to i8
  %l = lshr i32 %z, 3
  %o = or i32 %l, 0
  %g = getelementptr inbounds i32, ptr %p, i64 2
  %x = load i32, ptr %g
  %y = bitcast i32 %x to float
  %fz = fneg float %y
  call void @llvm.donothing()
  store i8 %t, ptr %p
  %c = icmp ult i32 %o, 100
  %w = insertelement <2 x i32> %a, i32 %x, i32 0
  ret <2 x i32> %w
}
