// ProGraML program graphs of an LLVM module, with the schema of ProGraML's LLVM graph builder as CompilerGym
// 0.2.5 runs it (its Programl / ProgramlJson observations): instruction, variable and constant nodes, control,
// data and call edges, one graph per module, node 0 the "[external]" root.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llvm {
class Module;
}

namespace bpq {

// ProGraML's Node.Type and Edge.Flow numbers.
enum class NodeType : int8_t { Instruction = 0, Variable = 1, Constant = 2 };
enum class Flow : int8_t { Control = 0, Data = 1, Call = 2 };

// An integer feature list attached to node `owner` (or function `owner`): ProGraML's int64_list features.
struct IntFeature {
  int32_t owner;
  std::string name;
  std::vector<int64_t> values;
};

struct ProgramGraph {
  // Nodes, indexed by id; every vector is (N,). Node 0 is the root, an instruction node "[external]" with no
  // features (hasFullText[0] == 0); every other node carries the feature full_text = [fullText[i]].
  std::vector<int8_t> nodeType;            // NodeType
  std::vector<std::string> nodeText;       // opcode name; a variable's or constant's type; "; undefined function"
  std::vector<std::string> nodeFullText;   // the instruction, "<type> <name>", the constant's text
  std::vector<uint8_t> hasFullText;
  std::vector<int32_t> nodeFunction;       // index into functionNames (0 where ProGraML leaves it unset)
  std::vector<int32_t> nodeBlock;          // module-wide basic block counter (0 where unset)
  // Edges, (E, 4) row-major: flow (Flow), position, source node, target node.
  std::vector<int32_t> edges;
  std::vector<IntFeature> nodeFeatures;    // profile weights (llvm_profile_*), where the IR has them
  std::vector<std::string> functionNames;  // every function of the module, in module order
  std::vector<IntFeature> functionFeatures;  // llvm_profile_entry_count
  std::string moduleName;                  // the module's source file name
  std::string targetTriple;
  std::string dataLayout;
  std::vector<std::pair<std::string, int64_t>> moduleFeatures;  // llvm_profile_* of a ProfileSummary flag
};

// The graph of `M`. Where ProGraML's order is that of a hash map (argument variables within a function, the
// root's call edges, call sites, constants), this one is the order of the IR: arguments by number, functions and
// call sites as they appear, constants by first use. Everything else is in ProGraML's order.
ProgramGraph programGraph(const llvm::Module &M);

}  // namespace bpq
