; Quirks: phi counting (BeginPhi per block, BBHiPhi, ArgsPhi), the pred/succ else-if chain, one critical edge.
define i32 @loop(i32 %n) {
entry:
  br label %header
header:
  %i = phi i32 [ 0, %entry ], [ %i1, %latch ]
  %a = phi i32 [ 0, %entry ], [ %a1, %latch ]
  %b = phi i32 [ 1, %entry ], [ %b1, %latch ]
  %c = phi i32 [ 2, %entry ], [ %c1, %latch ]
  %cmp = icmp slt i32 %i, %n
  br i1 %cmp, label %body, label %exit
body:
  %odd = and i32 %i, 1
  %isodd = icmp eq i32 %odd, 0
  br i1 %isodd, label %latch, label %bump
bump:
  %a2 = shl i32 %a, 1
  br label %latch
latch:
  %a1 = phi i32 [ %a, %body ], [ %a2, %bump ]
  %i1 = add i32 %i, 1
  %b1 = xor i32 %b, %a1
  %c1 = sub i32 %c, %b1
  br label %header
exit:
  %r = ashr i32 %c, 2
  ret i32 %r
}
