#include "features.h"

#include <iterator>

#include "llvm/Analysis/CFG.h"
#include "llvm/IR/CFG.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/InstrTypes.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"

using namespace llvm;

namespace bpq {

// Indices into the Autophase vector; the order is CompilerGym's.
enum Autophase : int {
  BBNumArgsHi, BBNumArgsLo, onePred, onePredOneSuc, onePredTwoSuc, oneSuccessor, twoPred, twoPredOneSuc,
  twoEach, twoSuccessor, morePreds, BB03Phi, BBHiPhi, BBNoPhi, BeginPhi, BranchCount, returnInt,
  CriticalCount, NumEdges, const32Bit, const64Bit, numConstZeroes, numConstOnes, UncondBranches,
  binaryConstArg, NumAShrInst, NumAddInst, NumAllocaInst, NumAndInst, BlockMid, BlockLow, NumBitCastInst,
  NumBrInst, NumCallInst, NumGetElementPtrInst, NumICmpInst, NumLShrInst, NumLoadInst, NumMulInst,
  NumOrInst, NumPHIInst, NumRetInst, NumSExtInst, NumSelectInst, NumShlInst, NumStoreInst, NumSubInst,
  NumTruncInst, NumXorInst, NumZExtInst, TotalBlocks, TotalInsts, TotalMemInst, TotalFuncs, ArgsPhi,
  testUnary,
};

const std::vector<std::string> &autophaseNames() {
  static const std::vector<std::string> names = {
      "BBNumArgsHi", "BBNumArgsLo", "onePred", "onePredOneSuc", "onePredTwoSuc", "oneSuccessor", "twoPred",
      "twoPredOneSuc", "twoEach", "twoSuccessor", "morePreds", "BB03Phi", "BBHiPhi", "BBNoPhi", "BeginPhi",
      "BranchCount", "returnInt", "CriticalCount", "NumEdges", "const32Bit", "const64Bit", "numConstZeroes",
      "numConstOnes", "UncondBranches", "binaryConstArg", "NumAShrInst", "NumAddInst", "NumAllocaInst",
      "NumAndInst", "BlockMid", "BlockLow", "NumBitCastInst", "NumBrInst", "NumCallInst",
      "NumGetElementPtrInst", "NumICmpInst", "NumLShrInst", "NumLoadInst", "NumMulInst", "NumOrInst",
      "NumPHIInst", "NumRetInst", "NumSExtInst", "NumSelectInst", "NumShlInst", "NumStoreInst", "NumSubInst",
      "NumTruncInst", "NumXorInst", "NumZExtInst", "TotalBlocks", "TotalInsts", "TotalMemInst", "TotalFuncs",
      "ArgsPhi", "testUnary"};
  return names;
}

namespace {

void countBlock(const BasicBlock &BB, AutophaseVector &v) {
  const Instruction *term = BB.getTerminator();
  const int64_t succ = term ? term->getNumSuccessors() : 0;
  // One entry per terminator use of BB, duplicates included.
  const int64_t pred = std::distance(pred_begin(&BB), pred_end(&BB));

  v[TotalBlocks]++;
  v[NumEdges] += succ;
  for (int64_t i = 0; i < succ; ++i)
    if (isCriticalEdge(term, static_cast<unsigned>(i), /*AllowIdenticalEdges=*/false)) v[CriticalCount]++;

  if (succ == 1) v[oneSuccessor]++;
  else if (succ == 2) v[twoSuccessor]++;
  if (pred == 1) v[onePred]++;
  else if (pred == 2) v[twoPred]++;
  else if (pred > 2) v[morePreds]++;
  // An else-if chain: the combinations are mutually exclusive, and unlisted ones count nowhere.
  if (pred == 1 && succ == 1) v[onePredOneSuc]++;
  else if (pred == 2 && succ == 1) v[twoPredOneSuc]++;
  else if (pred == 1 && succ == 2) v[onePredTwoSuc]++;
  else if (pred == 2 && succ == 2) v[twoEach]++;

  int64_t phis = 0, phiArgs = 0;
  for (const PHINode &phi : BB.phis()) {
    phis++;
    phiArgs += phi.getNumIncomingValues();
  }
  if (phiArgs > 5) v[BBNumArgsHi]++;
  else if (phiArgs >= 1) v[BBNumArgsLo]++;
  if (phis == 0) v[BBNoPhi]++;
  else if (phis <= 3) v[BB03Phi]++;
  else v[BBHiPhi]++;
  if (!BB.empty() && isa<PHINode>(BB.front())) v[BeginPhi]++;
}

// BlockLow / BlockMid by the block's size (BasicBlock::size(): every instruction), counted by the caller's walk.
void countBlockSize(int64_t size, AutophaseVector &v) {
  if (size < 15) v[BlockLow]++;
  else if (size <= 500) v[BlockMid]++;
}

void countInstruction(const Instruction &I, AutophaseVector &v) {
  v[TotalInsts]++;
  for (unsigned i = 0, n = I.getNumOperands(); i < n; ++i) {
    const auto *C = dyn_cast<ConstantInt>(I.getOperand(i));
    if (!C || !C->getType()->isIntegerTy()) continue;  // vector splats are not counted
    const unsigned width = C->getBitWidth();
    if (width == 32) v[const32Bit]++;
    else if (width == 64) v[const64Bit]++;
    if (C->getValue().isZero()) v[numConstZeroes]++;
    if (C->getValue().isOne()) v[numConstOnes]++;
  }
  if (isa<UnaryInstruction>(I)) v[testUnary]++;  // alloca, load, casts, va_arg, extractvalue, fneg; not freeze
  if (isa<BinaryOperator>(I) && (isa<Constant>(I.getOperand(0)) || isa<Constant>(I.getOperand(1))))
    v[binaryConstArg]++;

  switch (I.getOpcode()) {
    case Instruction::Br:
      v[BranchCount]++;
      v[NumBrInst]++;
      if (cast<BranchInst>(I).isUnconditional()) v[UncondBranches]++;
      break;
    case Instruction::Call: {
      v[NumCallInst]++;
      v[TotalMemInst]++;
      // getCalledFunction() is null for indirect calls and for calls whose type differs from the callee's.
      const Function *callee = cast<CallInst>(I).getCalledFunction();
      if (callee && callee->getReturnType()->isIntegerTy()) v[returnInt]++;
      break;
    }
    case Instruction::Invoke: v[TotalMemInst]++; break;
    case Instruction::AShr: v[NumAShrInst]++; break;
    case Instruction::Add: v[NumAddInst]++; break;
    case Instruction::Alloca: v[NumAllocaInst]++; v[TotalMemInst]++; break;
    case Instruction::And: v[NumAndInst]++; break;
    case Instruction::BitCast: v[NumBitCastInst]++; break;
    case Instruction::GetElementPtr: v[NumGetElementPtrInst]++; v[TotalMemInst]++; break;
    case Instruction::ICmp: v[NumICmpInst]++; break;
    case Instruction::LShr: v[NumLShrInst]++; break;
    case Instruction::Load: v[NumLoadInst]++; v[TotalMemInst]++; break;
    case Instruction::Mul: v[NumMulInst]++; break;
    case Instruction::Or: v[NumOrInst]++; break;
    case Instruction::PHI: v[NumPHIInst]++; v[ArgsPhi] += cast<PHINode>(I).getNumIncomingValues(); break;
    case Instruction::Ret: v[NumRetInst]++; break;
    case Instruction::SExt: v[NumSExtInst]++; break;
    case Instruction::Select: v[NumSelectInst]++; break;
    case Instruction::Shl: v[NumShlInst]++; break;
    case Instruction::Store: v[NumStoreInst]++; v[TotalMemInst]++; break;
    case Instruction::Sub: v[NumSubInst]++; break;
    case Instruction::Trunc: v[NumTruncInst]++; break;
    case Instruction::Xor: v[NumXorInst]++; break;
    case Instruction::ZExt: v[NumZExtInst]++; break;
    default: break;
  }
}

}  // namespace

AutophaseVector autophase(const Module &M, int64_t *instructionCount) {
  AutophaseVector v{};
  int64_t counted = 0;
  for (const Function &F : M) {
    v[TotalFuncs]++;  // declarations included
    for (const BasicBlock &BB : F) {
      countBlock(BB, v);
      int64_t size = 0;
      for (const Instruction &I : BB) {
        countInstruction(I, v);
        size++;
        if (instructionCount && !I.isDebugOrPseudoInst()) counted++;
      }
      countBlockSize(size, v);
    }
  }
  if (instructionCount) *instructionCount = counted;
  return v;
}

// ---------------------------------------------------------------------------------------------------------------
// InstCount: LLVM's own opcode set, so the names follow Instruction.def of the LLVM we build against.

namespace {
constexpr unsigned kNumTotals = 3;
}

const std::vector<std::string> &instcountNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"TotalInstsCount", "TotalBlocksCount", "TotalFuncsCount"};
    out.resize(kNumTotals + Instruction::OtherOpsEnd - 1);
#define HANDLE_INST(N, OPC, CLASS) out[kNumTotals + (N) - 1] = #OPC "Count";
#include "llvm/IR/Instruction.def"
    return out;
  }();
  return names;
}

std::vector<int64_t> instcount(const Module &M) {
  std::vector<int64_t> v(instcountNames().size(), 0);
  for (const Function &F : M) {
    if (F.isDeclaration()) continue;
    v[2]++;
    for (const BasicBlock &BB : F) {
      v[1]++;
      for (const Instruction &I : BB) {
        v[0]++;
        v[kNumTotals + I.getOpcode() - 1]++;
      }
    }
  }
  return v;
}

}  // namespace bpq
