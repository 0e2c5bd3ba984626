#include "engine.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/DebugInfo.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

using namespace llvm;

namespace bpq {

// ---------------------------------------------------------------------------------------------------------------
// Parsing and serialization

std::unique_ptr<Module> parseBitcode(std::string_view bitcode, LLVMContext &ctx) {
  Expected<std::unique_ptr<Module>> M =
      parseBitcodeFile(MemoryBufferRef(StringRef(bitcode.data(), bitcode.size()), "<bitcode>"), ctx);
  if (!M) throw InputError("invalid bitcode: " + toString(M.takeError()));
  return std::move(*M);
}

std::string writeBitcode(const Module &M, bool preserveUseListOrder) {
  std::string out;
  raw_string_ostream os(out);
  WriteBitcodeToFile(M, os, preserveUseListOrder);
  os.flush();
  return out;
}

std::string prepare(std::string_view data, const std::string &name) {
  LLVMContext ctx;
  std::unique_ptr<Module> M;
  const auto *begin = reinterpret_cast<const unsigned char *>(data.data());
  if (isBitcode(begin, begin + data.size())) {
    M = parseBitcode(data, ctx);
  } else {
    const std::string text(data);  // null-terminated copy for the lexer
    SMDiagnostic diag;
    M = parseAssembly(MemoryBufferRef(text, name), diag, ctx);
    if (!M) {
      std::string msg;
      raw_string_ostream os(msg);
      diag.print(nullptr, os, /*ShowColors=*/false);
      throw InputError("invalid LLVM IR: " + StringRef(os.str()).trim().str());
    }
  }
  std::string problems;
  raw_string_ostream os(problems);
  bool brokenDebugInfo = false;
  if (verifyModule(*M, &os, &brokenDebugInfo))
    throw InputError("invalid LLVM IR (verifier): " + StringRef(os.str()).trim().str());
  StripDebugInfo(*M);
  std::vector<NamedMDNode *> named;
  for (NamedMDNode &node : M->named_metadata()) named.push_back(&node);
  for (NamedMDNode *node : named) M->eraseNamedMetadata(node);
  // The file name is not part of the program: without this, one source at two paths gives two modules.
  M->setSourceFileName("");
  M->setModuleIdentifier("");
  return writeBitcode(*M);
}

std::string bitcodeToText(std::string_view bitcode) {
  LLVMContext ctx;
  std::unique_ptr<Module> M = parseBitcode(bitcode, ctx);
  std::string out;
  raw_string_ostream os(out);
  M->print(os, nullptr);
  os.flush();
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Progress slots

void Progress::begin(int thread, int64_t module, int64_t pipeline) const {
  if (!slots || thread >= capacity) return;
  int64_t *slot = slots + 3 * thread;
  __atomic_store_n(slot + 0, module, __ATOMIC_RELAXED);
  __atomic_store_n(slot + 1, pipeline, __ATOMIC_RELAXED);
  __atomic_fetch_add(slot + 2, 1, __ATOMIC_RELEASE);
}

void Progress::end(int thread) const {
  if (!slots || thread >= capacity) return;
  __atomic_store_n(slots + 3 * thread, int64_t(-1), __ATOMIC_RELEASE);
}

// ---------------------------------------------------------------------------------------------------------------
// Runner: one PassBuilder and its analysis managers. Used by one thread at a time; runners
// are pooled so analysis registration is paid once per thread slot.

namespace {

// A "bpq-inline-threshold<N>" element (ours, not LLVM's; one, at the top level of the pipeline) sets the threshold
// of the inliner that the default pipelines of the pipeline build (PipelineTuningOptions::InlinerThreshold: what
// opt's -inline-threshold=N does, for every caller, minsize ones included) instead of their level's own. Returns
// the threshold (-1: none given) and the pipeline without the element.
constexpr char kInlineThreshold[] = "bpq-inline-threshold<";

std::pair<int, std::string> splitInlineThreshold(const std::string &text) {
  const size_t prefix = sizeof(kInlineThreshold) - 1;
  const size_t at = text.find(kInlineThreshold);
  if (at == std::string::npos) return {-1, text};
  const auto invalid = [&] {
    return InputError("invalid pass pipeline '" + text + "': bpq-inline-threshold<N> takes an integer N other than "
                      "-1, once, beside the passes it applies to (e.g. bpq-inline-threshold<0>,default<Oz>)");
  };
  const size_t close = text.find('>', at + prefix);
  if (close == std::string::npos || (at > 0 && text[at - 1] != ',')) throw invalid();
  int threshold = 0;
  const std::string number = text.substr(at + prefix, close - at - prefix);
  if (number.empty() || StringRef(number).getAsInteger(10, threshold) || threshold == -1) throw invalid();
  std::string rest = text.substr(0, at) + text.substr(close + 1);          // the element out, then one comma
  if (at > 0 && (close + 1 == text.size() || text[close + 1] == ','))
    rest = text.substr(0, at - 1) + text.substr(close + 1);
  else if (at == 0 && close + 1 < text.size() && text[close + 1] == ',')
    rest = text.substr(close + 2);
  else if (close + 1 != text.size())
    throw invalid();
  if (rest.empty() || rest.find(kInlineThreshold) != std::string::npos) throw invalid();
  return {threshold, rest};
}

class Runner {
 public:
  // With no TargetMachine: generic TTI (measure mode); TargetLibraryInfo comes from each module's triple.
  explicit Runner(TargetMachine *tm = nullptr, PipelineTuningOptions tuning = PipelineTuningOptions())
      : builder_(tm, tuning), tm_(tm), tuning_(tuning) {
    builder_.registerModuleAnalyses(mam_);
    builder_.registerCGSCCAnalyses(cgam_);
    builder_.registerFunctionAnalyses(fam_);
    builder_.registerLoopAnalyses(lam_);
    builder_.crossRegisterProxies(lam_, fam_, cgam_, mam_);
  }

  // A fresh pass manager per run: pass objects are not reusable across modules (running a cached
  // default<Oz> twice crashes LLVM 19), and building one costs ~20 us against ~0.5 ms or more of passes.
  // A pipeline that sets the inliner's threshold (splitInlineThreshold) is parsed by a builder tuned that way; its
  // passes use this runner's analysis managers as any other.
  std::unique_ptr<ModulePassManager> pipeline(const std::string &text) {
    auto mpm = std::make_unique<ModulePassManager>();
    const auto [threshold, rest] = splitInlineThreshold(text);
    Error err = Error::success();
    if (threshold == -1) {
      err = builder_.parsePassPipeline(*mpm, rest);
    } else {
      std::unique_ptr<PassBuilder> &tuned = tuned_[threshold];   // kept: the passes may refer to their builder
      if (!tuned) {
        PipelineTuningOptions tuning = tuning_;
        tuning.InlinerThreshold = threshold;
        tuned = std::make_unique<PassBuilder>(tm_, tuning);
      }
      err = tuned->parsePassPipeline(*mpm, rest);
    }
    if (err) throw InputError("invalid pass pipeline '" + text + "': " + toString(std::move(err)));
    return mpm;
  }

  // A copy parsed into a fresh LLVMContext. Reusing one context would rename identified struct types on
  // later parses (%struct.node.0) and make results depend on what the thread parsed before; a fresh context
  // costs ~20 us of the ~140 us a small module's copy takes.
  struct Copy {
    std::unique_ptr<LLVMContext> context = std::make_unique<LLVMContext>();
    std::unique_ptr<Module> module;  // declared last: destroyed before its context
  };
  Copy parse(std::string_view bitcode) {
    Copy copy;
    copy.module = parseBitcode(bitcode, *copy.context);
    return copy;
  }

  PreservedAnalyses run(Module &M, ModulePassManager &mpm) {
    PreservedAnalyses preserved = mpm.run(M, mam_);
    // Results are keyed by IR addresses: drop them before the module goes away.
    lam_.clear();
    fam_.clear();
    cgam_.clear();
    mam_.clear();
    return preserved;
  }

 private:
  PassBuilder builder_;
  TargetMachine *tm_;
  PipelineTuningOptions tuning_;
  std::map<int, std::unique_ptr<PassBuilder>> tuned_;
  LoopAnalysisManager lam_;
  FunctionAnalysisManager fam_;
  CGSCCAnalysisManager cgam_;
  ModuleAnalysisManager mam_;
};

std::mutex poolMutex;
std::vector<std::unique_ptr<Runner>> pool;

std::unique_ptr<Runner> acquireRunner() {
  std::lock_guard<std::mutex> lock(poolMutex);
  if (pool.empty()) return std::make_unique<Runner>();
  std::unique_ptr<Runner> runner = std::move(pool.back());
  pool.pop_back();
  return runner;
}

void releaseRunner(std::unique_ptr<Runner> runner) {
  std::lock_guard<std::mutex> lock(poolMutex);
  pool.push_back(std::move(runner));
}

// RAII lease of a pooled runner.
struct Lease {
  std::unique_ptr<Runner> runner = acquireRunner();
  ~Lease() { releaseRunner(std::move(runner)); }
  Runner *operator->() { return runner.get(); }
};

// Runs work(thread) on `threads` threads (at least one; the caller's thread when one).
template <typename F>
void onThreads(int64_t threads, F work) {
  if (threads <= 1) {
    work(0);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (std::thread &t : pool) t.join();
}

}  // namespace

std::string checkPipeline(const std::string &pipeline) {
  Lease lease;
  try {
    lease->pipeline(pipeline);
  } catch (const InputError &e) {
    return e.what();
  }
  return "";
}

TargetSpec hostTarget() {
  TargetSpec host;
  host.triple = sys::getDefaultTargetTriple();
  host.cpu = sys::getHostCPUName().str();
  SubtargetFeatures features;
  for (const auto &feature : sys::getHostCPUFeatures()) features.AddFeature(feature.first(), feature.second);
  host.features = features.getString();
  return host;
}

namespace {

std::unique_ptr<TargetMachine> targetMachine(const TargetSpec &spec) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    InitializeAllTargetInfos();
    InitializeAllTargets();
    InitializeAllTargetMCs();
  });
  std::string error;
  const Target *target = TargetRegistry::lookupTarget(spec.triple, error);
  if (!target) throw InputError("unknown target '" + spec.triple + "': " + error);
  std::unique_ptr<TargetMachine> tm(target->createTargetMachine(
      spec.triple, spec.cpu.empty() ? "generic" : spec.cpu, spec.features, TargetOptions(), Reloc::PIC_, std::nullopt, CodeGenOptLevel::Aggressive));
  if (!tm) throw InputError("cannot make a target machine for '" + spec.triple + "' (cpu '" + spec.cpu + "')");
  return tm;
}

// clang -O1 turns unrolling off by tagging every loop with llvm.loop.unroll.disable, and the package compiles
// sources at -O1 with LLVM passes disabled: code meant to run gets its loops back as clang -O2/-O3 emits them
// (an explicit #pragma nounroll is dropped the same way).
void allowUnrolling(Module &M) {
  for (Function &F : M)
    for (BasicBlock &BB : F) {
      Instruction *term = BB.getTerminator();
      MDNode *loop = term ? term->getMetadata(LLVMContext::MD_loop) : nullptr;
      if (!loop) continue;
      SmallVector<Metadata *, 4> ops{nullptr};
      bool dropped = false;
      for (unsigned i = 1; i < loop->getNumOperands(); ++i) {
        auto *node = dyn_cast_or_null<MDNode>(loop->getOperand(i).get());
        auto *name = node && node->getNumOperands() ? dyn_cast<MDString>(node->getOperand(0)) : nullptr;
        if (name && name->getString() == "llvm.loop.unroll.disable") {
          dropped = true;
          continue;
        }
        ops.push_back(loop->getOperand(i).get());
      }
      if (!dropped) continue;
      MDNode *fresh = MDNode::getDistinct(M.getContext(), ops);
      fresh->replaceOperandWith(0, fresh);
      term->setMetadata(LLVMContext::MD_loop, fresh);
    }
}

// Target mode: the module is for `tm`, and every definition is compiled for its CPU (clang -march=CPU). An
// empty CPU keeps each function's own target attributes (what clang wrote: -march as it was compiled).
void retarget(Module &M, const TargetMachine &tm, const TargetSpec &spec) {
  M.setTargetTriple(spec.triple);
  M.setDataLayout(tm.createDataLayout());
  allowUnrolling(M);
  if (spec.cpu.empty()) return;
  for (Function &F : M) {
    if (F.isDeclaration()) continue;
    F.addFnAttr("target-cpu", spec.cpu);
    F.addFnAttr("tune-cpu", spec.cpu);
    if (spec.features.empty())
      F.removeFnAttr("target-features");
    else
      F.addFnAttr("target-features", spec.features);
  }
}

}  // namespace

std::string runPipeline(std::string_view bitcode, const std::string &pipeline, const Progress &progress,
                        const TargetSpec &target) {
  if (!target.triple.empty()) {
    // Compiled as clang -O<level> would: a size pipeline (default<Oz> / default<Os>), or a size target (any
    // pipeline compiled as clang -Oz / -Os compiles its own), marks the definitions minsize/optsize and (Oz)
    // leaves the vectorizers off; any other is tuned as clang's -O2 and above.
    const bool oz = target.size == "Oz" || pipeline.find("default<Oz>") != std::string::npos;
    const bool os = target.size == "Os" || pipeline.find("default<Os>") != std::string::npos;
    PipelineTuningOptions tuning;  // the defaults leave SLP off
    tuning.LoopVectorization = tuning.SLPVectorization = !oz;
    tuning.LoopUnrolling = tuning.LoopInterleaving = true;
    std::unique_ptr<TargetMachine> tm = targetMachine(target);
    Runner runner(tm.get(), tuning);
    std::unique_ptr<ModulePassManager> mpm = runner.pipeline(pipeline);
    Runner::Copy copy = runner.parse(bitcode);
    retarget(*copy.module, *tm, target);
    if (oz || os)
      for (Function &F : *copy.module) {
        if (F.isDeclaration() || F.hasFnAttribute(Attribute::OptimizeNone)) continue;
        F.addFnAttr(Attribute::OptimizeForSize);
        if (oz) F.addFnAttr(Attribute::MinSize);
      }
    progress.begin(0, 0, 0);
    runner.run(*copy.module, *mpm);
    progress.end(0);
    return writeBitcode(*copy.module);
  }
  Lease lease;
  std::unique_ptr<ModulePassManager> mpm = lease->pipeline(pipeline);
  Runner::Copy copy = lease->parse(bitcode);
  progress.begin(0, 0, 0);
  lease->run(*copy.module, *mpm);
  progress.end(0);
  return writeBitcode(*copy.module);
}

BatchResult autophaseAfter(const std::vector<std::string> &bitcodes, const std::vector<std::string> &pipelines,
                           int threads, const Progress &progress) {
  const int64_t numModules = static_cast<int64_t>(bitcodes.size());
  const int64_t rows = static_cast<int64_t>(pipelines.size()) + 1;
  BatchResult result;
  result.features.assign(numModules * rows * kNumAutophase, 0);
  result.errors.assign(numModules, "");

  // Items are (module, row) pairs, handed out in order so that consecutive items share a module.
  std::atomic<int64_t> next{0};
  std::mutex errorMutex;
  auto work = [&](int thread) {
    Lease lease;
    for (int64_t item; (item = next.fetch_add(1)) < numModules * rows;) {
      const int64_t m = item / rows, row = item % rows;
      {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!result.errors[m].empty()) continue;
      }
      progress.begin(thread, m, row - 1);
      try {
        Runner::Copy copy = lease->parse(bitcodes[m]);
        if (row > 0) lease->run(*copy.module, *lease->pipeline(pipelines[row - 1]));
        const AutophaseVector v = autophase(*copy.module);
        std::copy(v.begin(), v.end(), result.features.begin() + (m * rows + row) * kNumAutophase);
      } catch (const std::exception &e) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (result.errors[m].empty()) result.errors[m] = e.what();
      }
      progress.end(thread);
    }
  };
  onThreads(std::min<int64_t>(threads, numModules * rows), work);
  return result;
}

TreeResult autophaseTree(const std::vector<std::string> &roots, const std::vector<int64_t> &parents,
                         const std::vector<std::string> &edges, const std::vector<uint8_t> &wanted,
                         const std::vector<uint8_t> &keep, int threads, const Progress &progress) {
  const int64_t numNodes = static_cast<int64_t>(parents.size());
  const int64_t numRoots = static_cast<int64_t>(roots.size());
  if (edges.size() != parents.size() || wanted.size() != parents.size() || keep.size() != parents.size())
    throw InputError("tree: parents, edges, wanted and keep must have one entry per node");
  std::vector<std::vector<int64_t>> children(numNodes), top(numRoots);
  for (int64_t k = 0; k < numNodes; ++k) {
    const int64_t p = parents[k];
    if (p >= k || p < -numRoots) throw InputError("tree: node " + std::to_string(k) + " has a bad parent");
    (p >= 0 ? children[p] : top[-p - 1]).push_back(k);
  }
  TreeResult result;
  result.features.assign(numNodes * kNumAutophase, 0);
  result.kept.assign(numNodes, "");
  result.errors.assign(numNodes, "");

  auto work = [&](int thread, int64_t r, Runner &runner) {
    // Depth-first. A frame is a node whose parent state is either `source` bitcode to parse, or the module
    // currently held in `held` (the parent's only child continues in place).
    struct Frame {
      int64_t node;
      std::shared_ptr<const std::string> source;  // null: continue in `held`
    };
    auto failSubtree = [&](int64_t k, const std::string &message) {
      std::vector<int64_t> stack{k};
      while (!stack.empty()) {
        const int64_t n = stack.back();
        stack.pop_back();
        result.errors[n] = message;
        stack.insert(stack.end(), children[n].begin(), children[n].end());
      }
    };
    auto rootSource = std::make_shared<const std::string>(roots[r]);
    std::vector<Frame> stack;
    for (auto it = top[r].rbegin(); it != top[r].rend(); ++it) stack.push_back({*it, rootSource});
    Runner::Copy held;
    while (!stack.empty()) {
      const Frame frame = stack.back();
      stack.pop_back();
      const int64_t k = frame.node;
      progress.begin(thread, r, k);
      try {
        if (frame.source) {
          held.module.reset();  // a module must go before its context
          held = runner.parse(*frame.source);
        }
        runner.run(*held.module, *runner.pipeline(edges[k]));
        if (wanted[k]) {
          const AutophaseVector v = autophase(*held.module);
          std::copy(v.begin(), v.end(), result.features.begin() + k * kNumAutophase);
        }
        const bool branches = children[k].size() > 1;
        std::shared_ptr<const std::string> bitcode;
        // Use-list order is part of the state: passes visit uses in that order, and a round trip that
        // lost it would make a sequence's result depend on where the tree happened to branch.
        if (keep[k] || branches)
          bitcode = std::make_shared<const std::string>(writeBitcode(*held.module, /*preserveUseListOrder=*/true));
        if (keep[k]) result.kept[k] = *bitcode;
        for (auto it = children[k].rbegin(); it != children[k].rend(); ++it)
          stack.push_back({*it, branches ? bitcode : nullptr});
      } catch (const std::exception &e) {
        failSubtree(k, e.what());  // its children were not pushed yet
        held.module.reset();
      }
      progress.end(thread);
    }
  };

  std::atomic<int64_t> next{0};
  auto loop = [&](int thread) {
    Lease lease;
    for (int64_t r; (r = next.fetch_add(1)) < numRoots;) work(thread, r, *lease.runner);
  };
  onThreads(std::min<int64_t>(threads, numRoots), loop);
  return result;
}

LiveModule::LiveModule(std::string_view bitcode)
    : context_(std::make_unique<LLVMContext>()), module_(parseBitcode(bitcode, *context_)) {}

LiveModule::~LiveModule() { module_.reset(); }

bool LiveModule::apply(const std::string &pipeline, const Progress &progress) {
  Lease lease;
  std::unique_ptr<ModulePassManager> mpm = lease->pipeline(pipeline);
  progress.begin(0, 0, 0);
  const PreservedAnalyses preserved = lease->run(*module_, *mpm);
  progress.end(0);
  return !preserved.areAllPreserved();
}

AutophaseVector LiveModule::autophase(int64_t *instructionCount) const {
  return bpq::autophase(*module_, instructionCount);
}

std::vector<int64_t> LiveModule::instcount() const { return bpq::instcount(*module_); }

int64_t LiveModule::instructionCount() const {
  int64_t count = 0;  // Module::getInstructionCount, without its std::function filter called per instruction
  for (const Function &F : *module_)
    for (const BasicBlock &BB : F)
      for (const Instruction &I : BB) count += !I.isDebugOrPseudoInst();
  return count;
}

std::string LiveModule::bitcode(bool preserveUseListOrder) const {
  return writeBitcode(*module_, preserveUseListOrder);
}

std::vector<double> timePipelines(const std::string &bitcode, const std::vector<std::string> &pipelines) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  Lease lease;
  double passes = 0, parsing = 0, features = 0;
  for (const std::string &p : pipelines) {
    const auto t0 = Clock::now();
    Runner::Copy copy = lease->parse(bitcode);
    std::unique_ptr<ModulePassManager> mpm = lease->pipeline(p);
    const auto t1 = Clock::now();
    lease->run(*copy.module, *mpm);
    const auto t2 = Clock::now();
    const AutophaseVector v = autophase(*copy.module);
    const auto t3 = Clock::now();
    (void)v;
    parsing += seconds(t1 - t0);
    passes += seconds(t2 - t1);
    features += seconds(t3 - t2);
  }
  return {passes, parsing, features};
}

}  // namespace bpq
