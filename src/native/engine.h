// Module preparation and pass execution against LLVM 19 (measure mode: no TargetMachine; target mode: see
// TargetSpec).
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
// With `preserveUseListOrder`, parsing the result gives the same use lists as `M` (bitcode of an
// intermediate state that must continue exactly as if in memory).
std::string writeBitcode(const llvm::Module &M, bool preserveUseListOrder = false);
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

// Where passes run. An empty `triple` is *measure* mode: no TargetMachine, generic TTI, results independent of
// the host (spectra, labels, Autophase). Otherwise *target* mode: a TargetMachine for `triple` and `cpu`
// (`features` added to the CPU's own), so TTI-driven passes (vectorizers, unrolling, inlining costs) see that
// target, and every function definition gets the matching "target-cpu"/"target-features"/"tune-cpu"
// attributes, as clang -march=CPU would have written them (the code generator reads those). An empty `cpu`
// keeps the attributes the module has (the CPU it was compiled for; TTI reads them per function).
// `size` "Oz" or "Os" marks every definition minsize/optsize (Oz) or optsize (Os) before any pipeline, as
// clang's front end does at that level; "" marks them only for a default<Oz> / default<Os> pipeline.
struct TargetSpec {
  std::string triple;
  std::string cpu;
  std::string features;
  std::string size;
};
// The host: its triple, CPU name and CPU features ("+avx2,+fma,..."), as clang -march=native sees them.
TargetSpec hostTarget();

// Applies `pipeline` to a fresh module parsed from `bitcode`; returns the result as bitcode.
std::string runPipeline(std::string_view bitcode, const std::string &pipeline, const Progress &progress,
                        const TargetSpec &target = TargetSpec());

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

// Prefix-tree evaluation of many pass sequences on shared starting points. Node k applies `edges[k]` (a
// pipeline) to the state of its parent: node `parents[k]` if >= 0, else root bitcode `roots[-parents[k] - 1]`.
// Nodes come in topological order (parents[k] < k). A chain applies its edge in place; where a node has several
// children its state is written to bitcode once and each child parses its own copy, exactly as a sequence
// evaluated from scratch parses a fresh copy. Root subtrees are spread over `threads` threads.
// Progress slots report (root, node). Returns Autophase at nodes with `wanted[k]`, bitcode at nodes with
// `keep[k]`, and per node an error (a failed node fails its subtree).
struct TreeResult {
  std::vector<int64_t> features;    // (K, 56), row-major; zero where not wanted or failed
  std::vector<std::string> kept;    // (K,), bitcode where keep[k], else empty
  std::vector<std::string> errors;  // (K,), empty string = success
};
TreeResult autophaseTree(const std::vector<std::string> &roots, const std::vector<int64_t> &parents,
                         const std::vector<std::string> &edges, const std::vector<uint8_t> &wanted,
                         const std::vector<uint8_t> &keep, int threads, const Progress &progress);

// One module kept in memory between pass applications (an environment's episode in a worker): passes run in
// place, features are read in place, and bitcode is written only when asked. Holds its own LLVMContext. A fork is
// a new LiveModule parsed from bitcode() (use-list order preserved), never CloneModule: the state continues
// exactly as the tree evaluation's intermediate states do.
class LiveModule {
 public:
  explicit LiveModule(std::string_view bitcode);
  ~LiveModule();
  LiveModule(const LiveModule &) = delete;
  LiveModule &operator=(const LiveModule &) = delete;

  // Applies `pipeline` in place with freshly cleared analyses (as one edge of autophaseTree). Returns whether the
  // passes reported a change (did not preserve every analysis), as CompilerGym's legacy pass manager reports it:
  // no bitcode is written to find out.
  bool apply(const std::string &pipeline, const Progress &progress);
  // With `instructionCount`, also the instruction count, from the same walk of the module.
  AutophaseVector autophase(int64_t *instructionCount = nullptr) const;
  std::vector<int64_t> instcount() const;
  int64_t instructionCount() const;
  // As runPipeline writes it; with `preserveUseListOrder`, parsing it continues exactly as this module would.
  std::string bitcode(bool preserveUseListOrder = false) const;

 private:
  std::unique_ptr<llvm::LLVMContext> context_;
  std::unique_ptr<llvm::Module> module_;  // destroyed before its context
};

// Timing floor for benchmarks: only the P pipeline runs of one module, in this thread, copies made outside
// the timed region. Returns {seconds in passes, seconds parsing copies, seconds extracting features}.
std::vector<double> timePipelines(const std::string &bitcode, const std::vector<std::string> &pipelines);

}  // namespace bpq
