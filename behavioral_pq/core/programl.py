"""ProGraML program graphs of a module, computed by the native core on LLVM 19, in the schema of ProGraML's LLVM
graph builder as CompilerGym 0.2.5's ``Programl`` and ``ProgramlJson`` observations give it.

One graph per module. Nodes (``type``: :data:`NODE_TYPES` index):

- *instruction*: ``text`` the opcode name (``"load"``), ``features["full_text"]`` the instruction as printed;
  node 0 is the root ``"[external]"`` (no features); a declared function is one node
  ``"; undefined function"`` (full text ``""``);
- *variable*: an SSA value one instruction uses: ``text`` its type (``"i32"``, ``"ptr"``; any struct type is
  ``"struct"``), full text ``"<type> <name>"`` (``"i32 %5"``; an argument's type as LLVM prints it,
  ``"%pair %p"``). A function argument is one node per function; an instruction's result is a new node at each
  use;
- *constant*: one per distinct constant operand of the module: ``text`` its type, full text ``"<type> <value>"``,
  or a global's definition line.

Edges (``flow``: :data:`EDGE_FLOWS` index, ``position``):

- *control*: instruction to the next in its block; a block's last instruction to the first of each successor,
  for blocks reachable from the entry. Position 0, as in CompilerGym 0.2.5 (ProGraML 0.3.2 and later number the
  successors);
- *data*: variable or constant to the instruction using it (position: the operand's index), and instruction to
  the variables of its result (position 0);
- *call*: a call site to the callee's first instruction and from each of its exits back (position 0); an exit is
  the last instruction of a block without successors that the entry reaches. Only a ``call`` whose callee is a
  function of the module, of the call's type, is a call site (not ``invoke``, indirect calls or aliases). The
  root calls every function the same way, so a declaration is linked to the root both ways.

``function`` is the node's index in ``graph["function"]`` and ``block`` a module-wide basic-block number, both 0
where ProGraML leaves them unset (the root, declarations' blocks, constants' functions). Argument variables and
constants take the block number after the last one visited, as ProGraML gives them.

Where ProGraML's order comes from a hash map (argument variables within a function, the root's call edges, call
sites, constants), the order here is the IR's. As in CompilerGym, every edge of the node-link JSON has key 0, so
:func:`programl_graph` (built as ``networkx.node_link_graph`` builds it) keeps one edge per (source, target)
pair where the JSON has several (``mul i32 %a, %a`` of an argument ``%a``: one data edge, the last one's
position); the JSON has them all.

Differences from ProGraML on LLVM 10 that come from the IR, not from the builder: opaque pointers (``ptr`` for
every pointer type; no pointer ``bitcast`` instructions or zero-index ``getelementptr``; a string literal is its
global, not a constant ``getelementptr`` expression; one ``ptr null`` for every typed null), and LLVM 19's own
instruction syntax.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from typing import Any, Dict, Iterator, Tuple

import networkx as nx

from behavioral_pq.core._native_loader import native
from behavioral_pq.core.module import ModuleLike, load_module

#: Node types by number (ProGraML's ``Node.Type``).
NODE_TYPES: Tuple[str, ...] = ("instruction", "variable", "constant")
#: Edge flows by number (ProGraML's ``Edge.Flow``).
EDGE_FLOWS: Tuple[str, ...] = ("control", "data", "call")


@contextlib.contextmanager
def _without_gc() -> Iterator[None]:
    """Cyclic garbage collection paused: a graph is ~10 containers per instruction, all alive, and the collections
    their allocation triggers would cost as much as building them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def programl_json(module: ModuleLike) -> Dict[str, Any]:
    """The module's ProGraML graph as node-link JSON (a dict), as CompilerGym's ``ProgramlJson`` observation gives
    it: ``{"directed": True, "graph": {"function": [...], "module": [...]}, "links": [...],
    "multigraph": True, "nodes": [...]}``, keys sorted as in CompilerGym's JSON text."""
    raw = native.programl(load_module(module).bitcode)
    with _without_gc():
        return _node_link(raw)


def _node_link(raw: Dict[str, Any]) -> Dict[str, Any]:
    nodes = [{"block": block, "features": {"full_text": [full]}, "function": function, "id": i, "text": text,
              "type": kind}
             for i, (kind, text, full, function, block) in enumerate(zip(
                 raw["node_type"].tolist(), raw["node_text"], raw["node_full_text"],
                 raw["node_function"].tolist(), raw["node_block"].tolist()))]
    del nodes[0]["features"]    # the root has none
    for node, name, values in raw["node_features"]:
        nodes[node]["features"][name] = list(values)
    links = [{"flow": flow, "key": 0, "position": position, "source": source, "target": target}
             for flow, position, source, target in raw["edges"].tolist()]

    function_features: Dict[int, Dict[str, list]] = {}
    for function, name, values in raw["function_features"]:
        function_features.setdefault(function, {})[name] = list(values)
    functions = [{**({"features": function_features[i]} if i in function_features else {}), "module": 0, "name": name}
                 for i, name in enumerate(raw["functions"])]
    module_features = {"llvm_data_layout": [raw["data_layout"]], "llvm_target_triple": [raw["target_triple"]]}
    module_features.update((name, [value]) for name, value in raw["module_features"])
    graph = {"function": functions,
             "module": [{"features": dict(sorted(module_features.items())), "name": raw["module"]}]}
    return {"directed": True, "graph": graph, "links": links, "multigraph": True, "nodes": nodes}


def graph_from_json(data: Dict[str, Any]) -> nx.MultiDiGraph:
    """A node-link ProGraML graph as networkx, as CompilerGym reads its JSON (``node_link_graph`` with
    ``multigraph=True, directed=True``): node attributes are the node's fields but ``id``, edge attributes
    ``flow`` and ``position``, the key each link's ``key`` (so links of one pair and key become one edge)."""
    graph = nx.MultiDiGraph()
    graph.graph = data.get("graph", {})
    with _without_gc():
        graph.add_nodes_from((n["id"], {k: v for k, v in n.items() if k != "id"}) for n in data["nodes"])
        graph.add_edges_from((e["source"], e["target"], e.get("key"),
                              {k: v for k, v in e.items() if k not in ("source", "target", "key")})
                             for e in data["links"])
    return graph


def programl_graph(module: ModuleLike) -> nx.MultiDiGraph:
    """The module's ProGraML graph as a networkx MultiDiGraph, as CompilerGym's ``Programl`` observation gives it
    (see :func:`graph_from_json`)."""
    return graph_from_json(programl_json(module))


def programl_counts(data: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """Node counts by type and edge (link) counts by flow of a node-link graph:
    ``{"nodes": {"instruction": n, "variable": n, "constant": n}, "edges": {"control": n, ...}}``."""
    nodes = Counter(n["type"] for n in data["nodes"])
    edges = Counter(e["flow"] for e in data["links"])
    return {"nodes": {name: nodes[i] for i, name in enumerate(NODE_TYPES)},
            "edges": {name: edges[i] for i, name in enumerate(EDGE_FLOWS)}}


__all__ = ["EDGE_FLOWS", "NODE_TYPES", "graph_from_json", "programl_counts", "programl_graph", "programl_json"]
