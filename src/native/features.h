// Static feature vectors of an LLVM module: Autophase (56) and InstCount.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace bpq {

constexpr int kNumAutophase = 56;
using AutophaseVector = std::array<int64_t, kNumAutophase>;

// Feature names, in vector order.
const std::vector<std::string> &autophaseNames();
const std::vector<std::string> &instcountNames();

// Autophase exactly as ../shared/spec/autophase.md states (CompilerGym 0.2.5 InstCount visitor). With
// `instructionCount`, the same walk also counts the instructions as Module::getInstructionCount does (debug and
// pseudo-probe intrinsics left out).
AutophaseVector autophase(const llvm::Module &M, int64_t *instructionCount = nullptr);

// Totals (instructions, blocks, defined functions) followed by one count per LLVM 19 opcode.
std::vector<int64_t> instcount(const llvm::Module &M);

}  // namespace bpq
