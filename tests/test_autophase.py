"""Autophase golden values: one micro-test per quirk of ../shared/spec/autophase.md, derived by hand.

Each expectation lists the non-zero features; every other feature must be 0.
"""

import numpy as np
import pytest
from conftest import DATA

import behavioral_pq as bpq
from behavioral_pq.core.features import INSTCOUNT_FEATURES

GOLDEN = {
    # f: 1 block (pred 0, succ 0: no pred/succ bucket), 4 insts. Operands: alloca's implicit `i32 1`
    # (const32, one) and `store i32 0` (const32, zero). Functions: f + 2 declarations = 3.
    # Mem: alloca + store + load = 3. Unary: alloca, load = 2.
    "alloca_decls.ll": dict(BBNoPhi=1, const32Bit=2, numConstZeroes=1, numConstOnes=1, NumAllocaInst=1,
                            BlockLow=1, NumLoadInst=1, NumRetInst=1, NumStoreInst=1, TotalBlocks=1, TotalInsts=4,
                            TotalMemInst=3, TotalFuncs=3, testUnary=2),
    # entry: succ 4 (default + 3 cases), pred 0. same: pred 3 (three case slots) -> morePreds, succ 1.
    # other: pred 1, succ 1 -> onePred, onePredOneSuc. exit: pred 2, succ 0 -> twoPred, no combination.
    # Critical: the 3 entry->same slots (succ(entry) > 1, pred(same) > 1); entry->other is not (pred 1).
    # Edges 4 + 1 + 1 = 6. Constants: case values 1, 2, 3 and phi values 10, 20 -> const32 5, one 1.
    "switch_dup.ll": dict(BBNumArgsLo=1, onePred=1, onePredOneSuc=1, oneSuccessor=2, twoPred=1, morePreds=1,
                          BB03Phi=1, BBNoPhi=3, BeginPhi=1, BranchCount=2, CriticalCount=3, NumEdges=6,
                          const32Bit=5, numConstOnes=1, UncondBranches=2, BlockLow=4, NumBrInst=2, NumPHIInst=1,
                          NumRetInst=1, TotalBlocks=4, TotalInsts=5, TotalFuncs=1, ArgsPhi=2),
    # entry: `br i1 %c, label %next, label %next`: succ 2, both slots critical (pred(next) = 2).
    # returnInt: @callee (i32) and @byte (i8) count; `call i64 @callee(i32 1)` has another type -> no callee.
    # Constants: select's `i1 true` (width 1: only numConstOnes), `i32 7`, `i32 1` -> const32 2, ones 2;
    # mul's `i64 -1` -> const64 1 (not one). binaryConstArg: add (ConstantExpr operand), mul (-1).
    # freeze is not unary; ptrtoint is -> testUnary 1. Mem: 3 calls.
    "calls_consts.ll": dict(twoPred=1, twoSuccessor=1, BBNoPhi=2, BranchCount=1, returnInt=2, CriticalCount=2,
                            NumEdges=2, const32Bit=2, const64Bit=1, numConstOnes=2, binaryConstArg=2, NumAddInst=1,
                            BlockLow=2, NumBrInst=1, NumCallInst=3, NumMulInst=1, NumRetInst=1, NumSelectInst=1,
                            TotalBlocks=2, TotalInsts=10, TotalMemInst=3, TotalFuncs=3, testUnary=1),
    # Blocks (pred, succ): entry (0, 1), header (2, 2) twoEach, body (1, 2) onePredTwoSuc, bump (1, 1)
    # onePredOneSuc, latch (2, 1) twoPredOneSuc, exit (1, 0). header: 4 phis (BBHiPhi), 8 incoming (> 5:
    # BBNumArgsHi); latch: 1 phi, 2 incoming (BB03Phi, BBNumArgsLo); both begin with a phi. Only body->latch
    # is critical. Constants: phis 0, 0, 1, 2; and 1; icmp 0; shl 1; add 1; ashr 2 -> const32 9, zero 3, one 4.
    "loop_phis.ll": dict(BBNumArgsHi=1, BBNumArgsLo=1, onePred=3, onePredOneSuc=1, onePredTwoSuc=1,
                         oneSuccessor=3, twoPred=2, twoPredOneSuc=1, twoEach=1, twoSuccessor=2, BB03Phi=1,
                         BBHiPhi=1, BBNoPhi=4, BeginPhi=2, BranchCount=5, CriticalCount=1, NumEdges=7, const32Bit=9,
                         numConstZeroes=3, numConstOnes=4, UncondBranches=3, binaryConstArg=4, NumAShrInst=1,
                         NumAddInst=1, NumAndInst=1, BlockLow=6, NumBrInst=5, NumICmpInst=2, NumPHIInst=5,
                         NumRetInst=1, NumShlInst=1, NumSubInst=1, NumXorInst=1, TotalBlocks=6, TotalInsts=19,
                         TotalFuncs=1, ArgsPhi=10),
    # One block of 16 instructions -> BlockMid. The splat <i32 1, i32 1> and 1.0 are not ConstantInt but
    # make add/fadd binaryConstArg, as do lshr 3 and or 0. Constants: 3, 0, 100, insertelement's 0 (const32
    # 4, zero 2), gep's i64 2 (const64). Unary: zext, sext, trunc, load, bitcast, fneg. Mem: gep, load, call,
    # store. Functions: vec + llvm.donothing.
    "vectors_mid.ll": dict(BBNoPhi=1, const32Bit=4, const64Bit=1, numConstZeroes=2, binaryConstArg=4,
                           NumAddInst=1, BlockMid=1, NumBitCastInst=1, NumCallInst=1, NumGetElementPtrInst=1,
                           NumICmpInst=1, NumLShrInst=1, NumLoadInst=1, NumOrInst=1, NumRetInst=1, NumSExtInst=1,
                           NumStoreInst=1, NumTruncInst=1, NumZExtInst=1, TotalBlocks=1, TotalInsts=16,
                           TotalMemInst=4, TotalFuncs=2, testUnary=6),
    # Debug info is stripped on load: the dbg.declare call (and its declaration) vanish; what is left is
    # alloca (i32 1), store, load, ret.
    "debug_info.ll": dict(BBNoPhi=1, const32Bit=1, numConstOnes=1, NumAllocaInst=1, BlockLow=1, NumLoadInst=1,
                          NumRetInst=1, NumStoreInst=1, TotalBlocks=1, TotalInsts=4, TotalMemInst=3, TotalFuncs=1,
                          testUnary=2),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_autophase_golden(name):
    expected = np.zeros(56, dtype=np.int64)
    for feature, value in GOLDEN[name].items():
        expected[bpq.AUTOPHASE_FEATURES.index(feature)] = value
    actual = bpq.autophase(DATA / "autophase" / name)
    assert actual.dtype == np.int64 and actual.shape == (56,)
    diff = {f: (int(a), int(e)) for f, a, e in zip(bpq.AUTOPHASE_FEATURES, actual, expected) if a != e}
    assert not diff, f"(actual, expected): {diff}"


def test_feature_names_are_compilergym_order():
    names = bpq.AUTOPHASE_FEATURES
    assert len(names) == 56 and len(set(names)) == 56
    assert names[0] == "BBNumArgsHi" and names[51] == "TotalInsts" and names[55] == "testUnary"


@pytest.mark.parametrize("program", ["sum_array", "matmul", "state_machine", "list_sort"])
def test_autophase_agrees_with_instcount(examples, program):
    """Two separately written counters must agree on what they share."""
    module = examples[program]
    ap = dict(zip(bpq.AUTOPHASE_FEATURES, bpq.autophase(module).tolist()))
    ic = dict(zip(INSTCOUNT_FEATURES, bpq.instcount(module).tolist()))
    assert ap["TotalInsts"] == ic["TotalInstsCount"] == module.instruction_count
    assert ap["TotalBlocks"] == ic["TotalBlocksCount"]
    for op in ["Add", "Alloca", "And", "BitCast", "Br", "Call", "GetElementPtr", "ICmp", "Load", "Mul", "PHI",
               "Ret", "SExt", "Select", "Store", "Sub", "Trunc", "ZExt"]:
        assert ap[f"Num{op}Inst"] == ic[f"{op}Count"], op
    assert ap["TotalMemInst"] == sum(ic[f"{op}Count"] for op in
                                     ["GetElementPtr", "Load", "Store", "Call", "Invoke", "Alloca"])
    assert sum(v for k, v in ic.items() if not k.startswith("Total")) == ic["TotalInstsCount"]


def test_instcount_names_follow_llvm19():
    names = INSTCOUNT_FEATURES
    assert names[:3] == ("TotalInstsCount", "TotalBlocksCount", "TotalFuncsCount")
    assert names[3:6] == ("RetCount", "BrCount", "SwitchCount")
    assert "FreezeCount" in names and "CallBrCount" in names
