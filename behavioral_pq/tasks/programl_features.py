"""ProGraML graph statistics: a fixed-length vector of counts read from a module's ProGraML graph
(:func:`~behavioral_pq.core.programl.programl_json`), the baseline ``bpq evaluate --programl``.

ProGraML (Cummins et al., ICML 2021) is a graph of a module's instructions, variables and constants joined by
control, data and call edges, meant to be read by a graph neural network. No GNN is trained here: the
representation is :data:`PROGRAML_DIM` statistics of the graph, each ``log1p`` of a count (or of a mean count), in
the order :data:`PROGRAML_FEATURES` names them:

- nodes by type (instruction, variable, constant) and edges by flow (control, data, call);
- instruction nodes by opcode over :data:`LLVM_OPCODES` (LLVM 19's), then the declared functions (the node
  ``"; undefined function"`` each has) and instruction nodes of any other text (none on LLVM 19; the root
  ``"[external]"`` is left out, as every graph has one);
- for each flow, the mean and the largest in-degree and out-degree, the mean taken over the nodes that have at
  least one edge of that flow in that direction (0 where none has);
- the defined functions and their basic blocks;
- data edges by position (0, 1, 2, 3 or more): an operand's index for a value used by an instruction, 0 for an
  instruction to the variables of its result.

A baseline that reads the graph's shape and opcode mix without learning from it; a GNN over the same graphs is not
part of this package. The vector is a function of the graph alone, so equal modules have equal vectors.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.core.module import ModuleLike, load_module
from behavioral_pq.core.programl import EDGE_FLOWS, NODE_TYPES, programl_json

#: LLVM 19's instruction opcodes, as ``Instruction::getOpcodeName`` writes them (the ``text`` of an instruction
#: node), in ``llvm/IR/Instruction.def``'s order (its internal ``UserOp1`` / ``UserOp2`` left out).
LLVM_OPCODES: Tuple[str, ...] = (
    "ret", "br", "switch", "indirectbr", "invoke", "resume", "unreachable", "cleanupret", "catchret", "catchswitch",
    "callbr", "fneg", "add", "fadd", "sub", "fsub", "mul", "fmul", "udiv", "sdiv", "fdiv", "urem", "srem", "frem",
    "shl", "lshr", "ashr", "and", "or", "xor", "alloca", "load", "store", "getelementptr", "fence", "cmpxchg",
    "atomicrmw", "trunc", "zext", "sext", "fptoui", "fptosi", "uitofp", "sitofp", "fptrunc", "fpext", "ptrtoint",
    "inttoptr", "bitcast", "addrspacecast", "cleanuppad", "catchpad", "icmp", "fcmp", "phi", "call", "select",
    "va_arg", "extractelement", "insertelement", "shufflevector", "extractvalue", "insertvalue", "landingpad",
    "freeze",
)
ROOT_TEXT = "[external]"
DECLARATION_TEXT = "; undefined function"
#: Data-edge positions counted apart; a position at or past the last is counted with it.
DATA_POSITIONS: Tuple[str, ...] = ("0", "1", "2", "3+")

#: The name of each dimension of the vector, in order (every value is log1p of what the name says).
PROGRAML_FEATURES: Tuple[str, ...] = (
    tuple(f"nodes:{t}" for t in NODE_TYPES)
    + tuple(f"edges:{f}" for f in EDGE_FLOWS)
    + tuple(f"opcode:{o}" for o in LLVM_OPCODES) + ("opcode:(declaration)", "opcode:(other)")
    + tuple(f"degree:{f}:{d}:{s}" for f in EDGE_FLOWS for d in ("in", "out") for s in ("mean", "max"))
    + ("functions", "blocks")
    + tuple(f"data-position:{p}" for p in DATA_POSITIONS)
)
PROGRAML_DIM = len(PROGRAML_FEATURES)
#: Largest module (IR instructions) whose graph is built: about 13 microseconds and 3 KB of Python objects an
#: instruction, so some 2 seconds and 450 MB at the limit; a larger module is refused (see :func:`programl_vectors`).
PROGRAML_INSTRUCTION_LIMIT = 150_000

_OPCODE_INDEX = {name: i for i, name in enumerate(LLVM_OPCODES)}


def graph_statistics(graph: Dict[str, Any]) -> np.ndarray:
    """The statistics of a node-link ProGraML graph (:func:`~behavioral_pq.core.programl.programl_json`'s),
    float32 (PROGRAML_DIM,), each ``log1p`` of the count :data:`PROGRAML_FEATURES` names."""
    nodes = graph["nodes"]
    types = np.fromiter((n["type"] for n in nodes), np.int64, len(nodes))
    links = np.array([(e["flow"], e["position"], e["source"], e["target"]) for e in graph["links"]],
                     np.int64).reshape(-1, 4)                                                  # (E, 4)
    flow, position, source, target = links.T

    opcodes = np.zeros(len(LLVM_OPCODES) + 2, np.float64)                       # + declarations, other text
    functions, blocks = set(), set()
    for node in nodes:
        if node["type"] != 0 or node["text"] == ROOT_TEXT:
            continue
        if node["text"] == DECLARATION_TEXT:
            opcodes[-2] += 1
            continue
        opcodes[_OPCODE_INDEX.get(node["text"], len(opcodes) - 1)] += 1
        functions.add(node["function"])
        blocks.add(node["block"])

    degrees = []
    for f in range(len(EDGE_FLOWS)):
        mask = flow == f
        for ends in (target[mask], source[mask]):                              # in-degree, then out-degree
            per_node = np.bincount(ends, minlength=len(nodes))
            has = per_node[per_node > 0]
            degrees += [float(has.mean()) if len(has) else 0.0, float(per_node.max(initial=0))]

    data_positions = np.minimum(position[flow == 1], len(DATA_POSITIONS) - 1)
    counts = np.concatenate([
        np.bincount(types, minlength=len(NODE_TYPES))[:len(NODE_TYPES)],
        np.bincount(flow, minlength=len(EDGE_FLOWS))[:len(EDGE_FLOWS)],
        opcodes, degrees, [len(functions), len(blocks)],
        np.bincount(data_positions, minlength=len(DATA_POSITIONS)),
    ]).astype(np.float64)
    return np.log1p(counts).astype(np.float32)


def programl_statistics(module: ModuleLike) -> np.ndarray:
    """The ProGraML graph statistics of a module (:func:`graph_statistics` of its graph): float32 (PROGRAML_DIM,)."""
    return graph_statistics(programl_json(module))


def programl_vectors(modules: Sequence[ModuleLike], *, instruction_limit: int = PROGRAML_INSTRUCTION_LIMIT
                     ) -> Tuple[np.ndarray, List[Optional[Exception]]]:
    """The ProGraML graph statistics of N modules, one at a time (memory: one graph).

    Returns:
        (float32 (N, PROGRAML_DIM), N errors): a module over ``instruction_limit`` IR instructions (a ValueError,
        before its graph is built) or whose graph cannot be built (its error) has a zero row.
    """
    out = np.zeros((len(modules), PROGRAML_DIM), np.float32)
    errors: List[Optional[Exception]] = [None] * len(modules)
    for i, source in enumerate(modules):
        try:
            module = load_module(source)
            if module.instruction_count > instruction_limit:
                raise ValueError(f"{module.name}: {module.instruction_count} instructions, over the "
                                 f"{instruction_limit} whose ProGraML graph is built")
            out[i] = programl_statistics(module)
        except (ValueError, RuntimeError, MemoryError) as exc:
            errors[i] = exc
    return out, errors


__all__ = ["DATA_POSITIONS", "LLVM_OPCODES", "PROGRAML_DIM", "PROGRAML_FEATURES", "PROGRAML_INSTRUCTION_LIMIT",
           "graph_statistics", "programl_statistics", "programl_vectors"]
