"""Static features: Autophase (56 integers, CompilerGym's definition) and InstCount (per-opcode counts)."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from behavioral_pq.core._native_loader import native
from behavioral_pq.core.module import ModuleLike, load_module

#: Autophase feature names in vector order (../shared/spec/autophase.md).
AUTOPHASE_FEATURES: Tuple[str, ...] = (
    "BBNumArgsHi", "BBNumArgsLo", "onePred", "onePredOneSuc", "onePredTwoSuc", "oneSuccessor", "twoPred",
    "twoPredOneSuc", "twoEach", "twoSuccessor", "morePreds", "BB03Phi", "BBHiPhi", "BBNoPhi", "BeginPhi",
    "BranchCount", "returnInt", "CriticalCount", "NumEdges", "const32Bit", "const64Bit", "numConstZeroes",
    "numConstOnes", "UncondBranches", "binaryConstArg", "NumAShrInst", "NumAddInst", "NumAllocaInst",
    "NumAndInst", "BlockMid", "BlockLow", "NumBitCastInst", "NumBrInst", "NumCallInst", "NumGetElementPtrInst",
    "NumICmpInst", "NumLShrInst", "NumLoadInst", "NumMulInst", "NumOrInst", "NumPHIInst", "NumRetInst",
    "NumSExtInst", "NumSelectInst", "NumShlInst", "NumStoreInst", "NumSubInst", "NumTruncInst", "NumXorInst",
    "NumZExtInst", "TotalBlocks", "TotalInsts", "TotalMemInst", "TotalFuncs", "ArgsPhi", "testUnary",
)
if tuple(native.autophase_names()) != AUTOPHASE_FEATURES:  # pragma: no cover - a build from other sources
    raise ImportError("native core and Python disagree on the Autophase feature order")

#: InstCount names: TotalInstsCount, TotalBlocksCount, TotalFuncsCount (definitions), then one per LLVM 19
#: opcode in Instruction.def order (RetCount, BrCount, ...).
INSTCOUNT_FEATURES: Tuple[str, ...] = tuple(native.instcount_names())


def autophase(module: ModuleLike) -> np.ndarray:
    """Autophase vector of a module: int64 (56,), in :data:`AUTOPHASE_FEATURES` order."""
    return native.autophase(load_module(module).bitcode)


def instcount(module: ModuleLike) -> np.ndarray:
    """InstCount vector of a module: int64 (len(INSTCOUNT_FEATURES),)."""
    return native.instcount(load_module(module).bitcode)
