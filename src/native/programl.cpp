#include "programl.h"

#include <deque>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/AssemblyAnnotationWriter.h"
#include "llvm/IR/CFG.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/ModuleSlotTracker.h"
#include "llvm/IR/ProfDataUtils.h"
#include "llvm/IR/ProfileSummary.h"
#include "llvm/Support/FormattedStream.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace bpq {

namespace {

std::string trimmedLeft(std::string s) {
  const size_t start = s.find_first_not_of(" \t\n");
  return start == std::string::npos ? std::string() : s.substr(start);
}

// Where each instruction's text lies in the module's printed IR: the text LLVM prints for the instruction
// alone (Value::print), here from one print of the whole module instead of one AssemblyWriter per instruction.
class InstructionSpans : public AssemblyAnnotationWriter {
 public:
  void emitInstructionAnnot(const Instruction *I, formatted_raw_ostream &os) override {
    current_ = I;
    start_ = os.tell();
  }
  void printInfoComment(const Value &V, formatted_raw_ostream &os) override {
    if (&V == current_) spans[current_] = {start_, os.tell() - start_};
    current_ = nullptr;
  }
  DenseMap<const Instruction *, std::pair<size_t, size_t>> spans;  // (offset, length)

 private:
  const Instruction *current_ = nullptr;
  size_t start_ = 0;
};

// <entry node, exit nodes> of a function; a declaration is its own entry and exit.
struct EntryExits {
  int32_t entry = -1;
  SmallVector<int32_t, 2> exits;
};

class Builder {
 public:
  explicit Builder(const Module &M) : M_(M), slots_(&M, /*ShouldInitializeAllMetadata=*/true) {
    raw_string_ostream os(printed_);
    M.print(os, &spans_);
    os.flush();
  }

  ProgramGraph build() {
    G_.moduleName = M_.getSourceFileName();
    G_.targetTriple = M_.getTargetTriple();
    G_.dataLayout = M_.getDataLayoutStr();
    addNode(NodeType::Instruction, "[external]", std::string(), /*function=*/0, /*block=*/0, /*fullText=*/false);

    std::vector<EntryExits> functions;  // in module order
    DenseMap<const Function *, int32_t> functionIndex;
    for (const Function &F : M_) {
      const auto index = static_cast<int32_t>(G_.functionNames.size());
      functionIndex[&F] = index;
      G_.functionNames.push_back(F.getName().str());
      if (F.hasProfileData())
        if (std::optional<Function::ProfileCount> count = F.getEntryCount())
          G_.functionFeatures.push_back({index, "llvm_profile_entry_count", {int64_t(count->getCount())}});
      functions.push_back(visitFunction(F, index));
    }

    // Call edges: the root calls every function, then each call site calls its callee; every exit returns.
    for (const EntryExits &f : functions) addCallSite(0, f);
    for (const auto &[site, callee] : callSites_) addCallSite(site, functions[functionIndex.lookup(callee)]);

    // One node per distinct constant operand of the module, with a data edge to each use.
    for (const auto &[constant, uses] : constants_) {
      const int32_t node = addNode(NodeType::Constant, typeText(constant->getType()), constantText(*constant),
                                   /*function=*/0, blockCount_);
      for (const auto &[user, position] : uses) addEdge(Flow::Data, position, node, user);
    }

    addProfileSummary();
    return std::move(G_);
  }

 private:
  EntryExits visitFunction(const Function &F, int32_t function) {
    EntryExits result;
    if (F.isDeclaration()) {
      result.entry = addNode(NodeType::Instruction, "; undefined function", std::string(), function, /*block=*/0);
      result.exits.push_back(result.entry);
      return result;
    }
    slots_.incorporateFunction(F);

    DenseMap<const BasicBlock *, std::pair<int32_t, int32_t>> blocks;  // first and last instruction nodes
    DenseMap<const Instruction *, int32_t> instructions;
    MapVector<const Argument *, SmallVector<std::pair<int32_t, int32_t>, 2>> argumentUses;  // (user, position)
    std::vector<std::pair<const Instruction *, int32_t>> producedVariables;  // (producer, variable node)

    for (const BasicBlock &block : F) {
      int32_t first = -1, last = -1;
      for (const Instruction &I : block) {
        const int32_t node = addNode(NodeType::Instruction, I.getOpcodeName(), text(I).str(), function, blockCount_);
        addProfileWeights(I, node);
        instructions[&I] = node;
        if (last >= 0) addEdge(Flow::Control, 0, last, node);
        if (const auto *call = dyn_cast<CallInst>(&I))
          if (const Function *callee = call->getCalledFunction()) callSites_.push_back({node, callee});

        int32_t position = 0;
        for (const Use &use : I.operands()) {
          const Value *value = use.get();
          if (isa<Function>(value)) {
            // A callee (or a function's address): the call edges say it, no data node.
          } else if (const auto *constant = dyn_cast<Constant>(value)) {
            constants_[constant].push_back({node, position});
          } else if (const auto *operand = dyn_cast<Instruction>(value)) {
            // A variable node per use, fed by its producer (connected once every block is visited).
            const int32_t variable =
                addNode(NodeType::Variable, typeText(operand->getType()), variableText(*operand), function,
                        blockCount_);
            addEdge(Flow::Data, position, variable, node);
            producedVariables.push_back({operand, variable});
          } else if (const auto *argument = dyn_cast<Argument>(value)) {
            argumentUses[argument].push_back({node, position});
          }
          // Basic blocks (control edges say them), inline assembly and metadata make no node.
          ++position;
        }
        if (first < 0) first = node;
        last = node;
      }
      blocks[&block] = {first, last};
      ++blockCount_;
    }

    // One variable node per used argument, numbered after the function's blocks as ProGraML numbers them.
    for (const Argument &argument : F.args()) {
      auto it = argumentUses.find(&argument);
      if (it == argumentUses.end()) continue;
      std::string full;
      raw_string_ostream os(full);
      argument.printAsOperand(os, /*PrintType=*/true, slots_);
      os.flush();
      const int32_t variable =
          addNode(NodeType::Variable, typeText(argument.getType()), std::move(full), function, blockCount_);
      for (const auto &[user, position] : it->second) addEdge(Flow::Data, position, variable, user);
    }
    for (const auto &[producer, variable] : producedVariables)
      addEdge(Flow::Data, 0, instructions.lookup(producer), variable);

    // Control edges between blocks, breadth first from the entry, all at position 0 as CompilerGym 0.2.5's
    // ProGraML gives them (ProGraML 0.3.2 and later number the successors). Blocks the walk reaches without
    // successors are the function's exits.
    const BasicBlock *entry = &F.getEntryBlock();
    result.entry = blocks.lookup(entry).first;
    DenseSet<const BasicBlock *> visited{entry};
    std::deque<const BasicBlock *> queue{entry};
    while (!queue.empty()) {
      const BasicBlock *current = queue.front();
      queue.pop_front();
      const int32_t exit = blocks.lookup(current).second;
      bool returns = true;
      for (const BasicBlock *next : successors(current)) {
        addEdge(Flow::Control, 0, exit, blocks.lookup(next).first);
        if (visited.insert(next).second) queue.push_back(next);
        returns = false;
      }
      if (returns) result.exits.push_back(exit);
    }
    return result;
  }

  void addCallSite(int32_t site, const EntryExits &callee) {
    addEdge(Flow::Call, 0, site, callee.entry);
    for (int32_t exit : callee.exits) addEdge(Flow::Call, 0, exit, site);
  }

  int32_t addNode(NodeType type, std::string text, std::string fullText, int32_t function, int32_t block,
                  bool hasFullText = true) {
    const auto id = static_cast<int32_t>(G_.nodeType.size());
    G_.nodeType.push_back(static_cast<int8_t>(type));
    G_.nodeText.push_back(std::move(text));
    G_.nodeFullText.push_back(std::move(fullText));
    G_.hasFullText.push_back(hasFullText);
    G_.nodeFunction.push_back(function);
    G_.nodeBlock.push_back(block);
    return id;
  }

  void addEdge(Flow flow, int32_t position, int32_t source, int32_t target) {
    G_.edges.insert(G_.edges.end(), {static_cast<int32_t>(flow), position, source, target});
  }

  // An instruction as the module prints it, without indentation.
  StringRef text(const Instruction &I) const {
    const auto [offset, length] = spans_.spans.lookup(&I);
    return StringRef(printed_).substr(offset, length).ltrim(" \t\n");
  }

  // "<type> <name>" of an instruction's result: its type, then its text up to the first " = ".
  std::string variableText(const Instruction &I) {
    const StringRef full = text(I);
    const size_t equals = full.find(" = ");
    if (equals == StringRef::npos) return std::string();
    return typeText(I.getType()) + ' ' + full.substr(0, equals).str();
  }

  // A type as ProGraML names it: "struct" for any struct type, else as LLVM prints it.
  std::string typeText(Type *type) {
    if (type->isStructTy()) return "struct";
    std::string out;
    raw_string_ostream os(out);
    type->print(os, /*IsForDebug=*/false, /*NoDetails=*/true);
    os.flush();
    // Without a module, LLVM names an unnamed struct type (inside an array, say) by its address; print it
    // through a value of that type instead, which numbers it as the module does.
    if (out.find("%\"type 0x") != std::string::npos && !type->isTokenTy() && !type->isLabelTy() &&
        !type->isMetadataTy() && !type->isVoidTy() && !type->isFunctionTy()) {
      out.clear();
      UndefValue::get(type)->printAsOperand(os, /*PrintType=*/true, slots_);
      os.flush();
      out.resize(out.size() - std::string(" undef").size());
    }
    return out;
  }

  // A global as its definition line; any other constant as "<type> <value>".
  std::string constantText(const Constant &C) {
    std::string out;
    raw_string_ostream os(out);
    if (isa<GlobalValue>(C))
      C.print(os, slots_);
    else
      C.printAsOperand(os, /*PrintType=*/true, slots_);
    os.flush();
    return trimmedLeft(std::move(out));
  }

  // Branch weights and total weight of an instruction's !prof, named in sorted order (ProGraML's JSON order).
  void addProfileWeights(const Instruction &I, int32_t node) {
    const MDNode *prof = I.getMetadata(LLVMContext::MD_prof);
    if (!prof) return;
    uint64_t total = 0;
    const bool hasTotal = I.extractProfTotalWeight(total);
    SmallVector<uint32_t, 2> weights;
    const bool hasBranch = extractBranchWeights(prof, weights) && weights.size() == 2;
    if (hasBranch) G_.nodeFeatures.push_back({node, "llvm_profile_false_weight", {int64_t(weights[1])}});
    if (hasTotal) G_.nodeFeatures.push_back({node, "llvm_profile_total_weight", {int64_t(total)}});
    if (hasBranch) G_.nodeFeatures.push_back({node, "llvm_profile_true_weight", {int64_t(weights[0])}});
  }

  void addProfileSummary() {
    Metadata *flag = M_.getModuleFlag("ProfileSummary");
    if (!flag) return;
    std::unique_ptr<ProfileSummary> summary(ProfileSummary::getFromMD(flag));
    if (!summary) return;
    G_.moduleFeatures = {{"llvm_profile_num_functions", summary->getNumFunctions()},
                         {"llvm_profile_max_function_count", summary->getMaxFunctionCount()},
                         {"llvm_profile_num_counts", summary->getNumCounts()},
                         {"llvm_profile_total_count", summary->getTotalCount()},
                         {"llvm_profile_max_count", summary->getMaxCount()},
                         {"llvm_profile_max_internal_count", summary->getMaxInternalCount()}};
  }

  const Module &M_;
  ModuleSlotTracker slots_;
  ProgramGraph G_;
  int32_t blockCount_ = 0;  // basic blocks visited so far, module-wide
  std::vector<std::pair<int32_t, const Function *>> callSites_;
  MapVector<const Constant *, SmallVector<std::pair<int32_t, int32_t>, 2>> constants_;  // (user, position)
  InstructionSpans spans_;
  std::string printed_;  // the module as text IR
};

}  // namespace

ProgramGraph programGraph(const Module &M) { return Builder(M).build(); }

}  // namespace bpq
