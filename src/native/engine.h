// Module preparation and pass execution against LLVM 19, with no TargetMachine.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "features.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace bpq {

// Malformed input (text IR, bitcode, pipeline). Maps to ValueError in Python.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Parses `.ll` text or bitcode (detected by magic), verifies it and prepares it as CompilerGym does:
// debug info stripped, all named metadata erased. Returns the prepared module as bitcode.
std::string prepare(std::string_view data, const std::string &name);

std::unique_ptr<llvm::Module> parseBitcode(std::string_view bitcode, llvm::LLVMContext &ctx);
std::string writeBitcode(const llvm::Module &M);
std::string bitcodeToText(std::string_view bitcode);

// Empty when `pipeline` is a valid new-pass-manager pipeline, else the parser's message.
std::string checkPipeline(const std::string &pipeline);

// Per-thread progress slots shared with a supervising process: 3 x int64 per thread
// (module index, pipeline index or -1 for "no pipeline", sequence number bumped at every start).
struct Progress {
  int64_t *slots = nullptr;
  int capacity = 0;  // number of thread slots
  void begin(int thread, int64_t module, int64_t pipeline) const;
  void end(int thread) const;
};

// Applies `pipeline` to a fresh module parsed from `bitcode`; returns the result as bitcode.
std::string runPipeline(std::string_view bitcode, const std::string &pipeline, const Progress &progress);

// For N modules and P pipelines: the Autophase vector of every module as given (row 0) and after each
// pipeline applied to a fresh copy re-parsed from bitcode (rows 1..P). Work items (module, row) are spread
// over `threads` threads, each with its own LLVMContext and pass managers. A module that fails (bad bitcode,
// bad pipeline) has an error message and zero rows; callers validate pipelines first.
struct BatchResult {
  std::vector<int64_t> features;    // (N, P + 1, 56), row-major
  std::vector<std::string> errors;  // (N,), empty string = success
};
BatchResult autophaseAfter(const std::vector<std::string> &bitcodes, const std::vector<std::string> &pipelines,
                           int threads, const Progress &progress);

// Timing floor for benchmarks: only the P pipeline runs of one module, in this thread, copies made outside
// the timed region. Returns {seconds in passes, seconds parsing copies, seconds extracting features}.
std::vector<double> timePipelines(const std::string &bitcode, const std::vector<std::string> &pipelines);

}  // namespace bpq
