"""ProGraML program graphs (behavioral_pq.core.programl): exact graphs of tiny modules, invariants on the examples,
the networkx view, the CLI."""

import json
import subprocess
import sys
from collections import Counter, defaultdict

import networkx as nx
import pytest
from conftest import EXAMPLES

from behavioral_pq.core.programl import EDGE_FLOWS, NODE_TYPES, programl_counts, programl_graph, programl_json

INSTRUCTION, VARIABLE, CONSTANT = range(3)
CONTROL, DATA, CALL = range(3)

LOOP = """
define i32 @sum(i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %acc = phi i32 [ 0, %entry ], [ %add, %loop ]
  %add = add i32 %acc, %i
  %next = add i32 %i, 1
  %done = icmp eq i32 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 %add
}
"""

CALLS = """
declare i32 @ext(i32)

define i32 @inc(i32 %x) {
  %y = add i32 %x, 1
  ret i32 %y
}

define i32 @main() {
  %a = call i32 @inc(i32 41)
  %b = call i32 @ext(i32 %a)
  ret i32 %b
}
"""


def nodes_of(graph):
    """(type, text, full_text or None, function, block) per node, in id order."""
    assert [n["id"] for n in graph["nodes"]] == list(range(len(graph["nodes"])))
    return [(n["type"], n["text"], n["features"]["full_text"][0] if "features" in n else None, n["function"],
             n["block"]) for n in graph["nodes"]]


def edges_of(graph):
    """(flow, position, source, target) per link, in order."""
    assert all(e["key"] == 0 for e in graph["links"])
    return [(e["flow"], e["position"], e["source"], e["target"]) for e in graph["links"]]


def test_loop_with_phis_exact():
    graph = programl_json(LOOP)
    assert nodes_of(graph) == [
        (INSTRUCTION, "[external]", None, 0, 0),
        (INSTRUCTION, "br", "br label %loop", 0, 0),
        (INSTRUCTION, "phi", "%i = phi i32 [ 0, %entry ], [ %next, %loop ]", 0, 1),
        (VARIABLE, "i32", "i32 %next", 0, 1),
        (INSTRUCTION, "phi", "%acc = phi i32 [ 0, %entry ], [ %add, %loop ]", 0, 1),
        (VARIABLE, "i32", "i32 %add", 0, 1),
        (INSTRUCTION, "add", "%add = add i32 %acc, %i", 0, 1),
        (VARIABLE, "i32", "i32 %acc", 0, 1),
        (VARIABLE, "i32", "i32 %i", 0, 1),
        (INSTRUCTION, "add", "%next = add i32 %i, 1", 0, 1),
        (VARIABLE, "i32", "i32 %i", 0, 1),
        (INSTRUCTION, "icmp", "%done = icmp eq i32 %next, %n", 0, 1),
        (VARIABLE, "i32", "i32 %next", 0, 1),
        (INSTRUCTION, "br", "br i1 %done, label %exit, label %loop", 0, 1),
        (VARIABLE, "i1", "i1 %done", 0, 1),
        (INSTRUCTION, "ret", "ret i32 %add", 0, 2),
        (VARIABLE, "i32", "i32 %add", 0, 2),
        (VARIABLE, "i32", "i32 %n", 0, 3),       # arguments: numbered after the function's blocks
        (CONSTANT, "i32", "i32 0", 0, 3),        # constants: after the module's blocks
        (CONSTANT, "i32", "i32 1", 0, 3),
    ]
    assert edges_of(graph) == [
        # block by block: control within the block, a variable node per instruction operand into its user
        (DATA, 1, 3, 2), (CONTROL, 0, 2, 4), (DATA, 1, 5, 4), (CONTROL, 0, 4, 6), (DATA, 0, 7, 6),
        (DATA, 1, 8, 6), (CONTROL, 0, 6, 9), (DATA, 0, 10, 9), (CONTROL, 0, 9, 11), (DATA, 0, 12, 11),
        (CONTROL, 0, 11, 13), (DATA, 0, 14, 13), (DATA, 0, 16, 15),
        (DATA, 1, 17, 11),                                       # the argument %n into the icmp
        (DATA, 0, 9, 3), (DATA, 0, 6, 5), (DATA, 0, 4, 7), (DATA, 0, 2, 8), (DATA, 0, 2, 10), (DATA, 0, 9, 12),
        (DATA, 0, 11, 14), (DATA, 0, 6, 16),                     # producers into their variables
        (CONTROL, 0, 1, 2), (CONTROL, 0, 13, 15), (CONTROL, 0, 13, 2),   # between blocks, breadth first
        (CALL, 0, 0, 1), (CALL, 0, 15, 0),                       # the root calls the function, its ret returns
        (DATA, 0, 18, 2), (DATA, 0, 18, 4), (DATA, 1, 19, 9),    # constants into their users
    ]
    assert graph["graph"]["function"] == [{"module": 0, "name": "sum"}]
    assert programl_counts(graph) == {"nodes": {"instruction": 9, "variable": 9, "constant": 2},
                                      "edges": {"control": 8, "data": 20, "call": 2}}


def test_calls_and_declaration_exact():
    graph = programl_json(CALLS)
    assert nodes_of(graph) == [
        (INSTRUCTION, "[external]", None, 0, 0),
        (INSTRUCTION, "; undefined function", "", 0, 0),        # @ext, a declaration
        (INSTRUCTION, "add", "%y = add i32 %x, 1", 1, 0),
        (INSTRUCTION, "ret", "ret i32 %y", 1, 0),
        (VARIABLE, "i32", "i32 %y", 1, 0),
        (VARIABLE, "i32", "i32 %x", 1, 1),
        (INSTRUCTION, "call", "%a = call i32 @inc(i32 41)", 2, 1),
        (INSTRUCTION, "call", "%b = call i32 @ext(i32 %a)", 2, 1),
        (VARIABLE, "i32", "i32 %a", 2, 1),
        (INSTRUCTION, "ret", "ret i32 %b", 2, 1),
        (VARIABLE, "i32", "i32 %b", 2, 1),
        (CONSTANT, "i32", "i32 1", 0, 2),
        (CONSTANT, "i32", "i32 41", 0, 2),
    ]
    assert edges_of(graph) == [
        (CONTROL, 0, 2, 3), (DATA, 0, 4, 3), (DATA, 0, 5, 2), (DATA, 0, 2, 4),
        (CONTROL, 0, 6, 7), (DATA, 0, 8, 7), (CONTROL, 0, 7, 9), (DATA, 0, 10, 9), (DATA, 0, 6, 8),
        (DATA, 0, 7, 10),
        (CALL, 0, 0, 1), (CALL, 0, 1, 0), (CALL, 0, 0, 2), (CALL, 0, 3, 0), (CALL, 0, 0, 6), (CALL, 0, 9, 0),
        (CALL, 0, 6, 2), (CALL, 0, 3, 6),       # main calls inc: to its entry, back from its ret
        (CALL, 0, 7, 1), (CALL, 0, 1, 7),       # main calls ext: to and from the declaration's node
        (DATA, 1, 11, 2), (DATA, 0, 12, 6),     # the callee operand (position 1 of the call) makes no edge
    ]
    assert [f["name"] for f in graph["graph"]["function"]] == ["ext", "inc", "main"]


TYPES = """
%pair = type { i32, i64 }
%0 = type { i32 }
@g = global i32 7

define i64 @f(%pair %p, ptr %q, i64 %k) {
  %a = extractvalue %pair %p, 1
  %s = mul i64 %a, %a
  %t = mul i64 %k, %k
  %u = add i64 %s, %t
  %arr = load [2 x %0], ptr %q
  %e = extractvalue [2 x %0] %arr, 1, 0
  %v = load i32, ptr @g
  %b = insertvalue %pair %p, i64 %u, 1
  %c = extractvalue %pair %b, 0
  ret i64 %u
}
"""


def test_types_texts_and_repeated_operands():
    graph = programl_json(TYPES)
    nodes = nodes_of(graph)
    texts = Counter((kind, text, full) for kind, text, full, _, _ in nodes)
    assert texts[VARIABLE, "struct", "%pair %p"] == 1               # any struct type is "struct" ...
    assert texts[VARIABLE, "struct", "struct %b"] == 1              # ... in a result's full text too
    assert texts[VARIABLE, "ptr", "ptr %q"] == 1
    assert texts[VARIABLE, "i64", "i64 %a"] == 2                     # one variable node per use
    assert texts[CONSTANT, "ptr", "@g = global i32 7"] == 1          # a global: its definition line
    assert texts[INSTRUCTION, "load", "%arr = load [2 x %0], ptr %q, align 4"] == 1
    assert texts[VARIABLE, "[2 x %0]", "[2 x %0] %arr"] == 1       # an unnamed struct type by its number,
    assert not any("type 0x" in str(n) for n in nodes)               # never by its address
    k = next(i for i, n in enumerate(nodes) if n[2] == "i64 %k")
    t = next(i for i, n in enumerate(nodes) if n[1] == "mul" and "%t" in n[2])
    assert Counter(e for e in edges_of(graph) if e[2] == k) == {(DATA, 0, k, t): 1, (DATA, 1, k, t): 1}
    # networkx, as CompilerGym reads the JSON: links of one pair and key are one edge, the last one's position
    multigraph = programl_graph(TYPES)
    assert multigraph.number_of_edges() == len(graph["links"]) - 1    # only k -> t repeats (%a: two nodes)
    assert dict(multigraph.get_edge_data(k, t)) == {0: {"flow": DATA, "position": 1}}


def test_profile_features():
    graph = programl_json("""
define i32 @f(i32 %x) !prof !0 {
entry:
  %c = icmp sgt i32 %x, 0
  br i1 %c, label %a, label %b, !prof !1
a:
  ret i32 1
b:
  ret i32 2
}
!0 = !{!"function_entry_count", i64 100}
!1 = !{!"branch_weights", i32 3, i32 5}
""")
    branch = next(n for n in graph["nodes"] if n["text"] == "br")
    assert branch["features"] == {"full_text": ["br i1 %c, label %a, label %b, !prof !1"],
                                  "llvm_profile_false_weight": [5], "llvm_profile_total_weight": [8],
                                  "llvm_profile_true_weight": [3]}
    assert graph["graph"]["function"] == [{"features": {"llvm_profile_entry_count": [100]}, "module": 0,
                                           "name": "f"}]
    # two returns: both go back to the root
    rets = [n["id"] for n in graph["nodes"] if n["text"] == "ret"]
    assert sorted(e["source"] for e in graph["links"] if e["flow"] == CALL and e["target"] == 0) == rets


def check_invariants(graph):
    nodes, links = graph["nodes"], graph["links"]
    kind = [n["type"] for n in nodes]
    function = [n["function"] for n in nodes]
    text = [n["text"] for n in nodes]
    full = [n["features"]["full_text"][0] if "features" in n else None for n in nodes]
    into, out = defaultdict(list), defaultdict(list)
    for e in links:
        into[e["target"]].append(e)
        out[e["source"]].append(e)
    functions = len(graph["graph"]["function"])
    block = [n["block"] for n in nodes]
    per_block = Counter(block[i] for i in range(1, len(nodes)) if kind[i] == INSTRUCTION)

    for i in range(1, len(nodes)):
        # control edges reach every instruction but those alone in a block the entry does not reach
        if kind[i] == INSTRUCTION and text[i] != "; undefined function" and per_block[block[i]] > 1:
            assert any(e["flow"] == CONTROL for e in into[i] + out[i]), full[i]
        if kind[i] == VARIABLE:
            users = [e for e in out[i] if e["flow"] == DATA]
            producers = [e for e in into[i] if e["flow"] == DATA]
            assert users and all(kind[e["target"]] == INSTRUCTION for e in users)
            if producers:    # an instruction's result: one node per use, named as its producer names it
                assert len(users) == 1 and len(producers) == 1 and producers[0]["position"] == 0
                name = full[i].split(" ")[-1]
                assert full[producers[0]["source"]].startswith(f"{name} = "), (full[i], full[producers[0]["source"]])
                assert name in full[users[0]["target"]]
            assert function[i] == function[users[0]["target"]]
        if kind[i] == CONSTANT:
            assert not into[i] and out[i] and all(e["flow"] == DATA for e in out[i])

    # data edges into an instruction: operand indices, one per operand, contiguous where every operand is a value
    for i in range(1, len(nodes)):
        if kind[i] != INSTRUCTION:
            continue
        positions = sorted(e["position"] for e in into[i] if e["flow"] == DATA)
        assert len(positions) == len(set(positions)), full[i]
        if text[i] in {"add", "sub", "mul", "icmp", "store", "load", "getelementptr", "sext", "zext", "select"}:
            assert positions == list(range(len(positions))) and positions, full[i]
        if text[i] in {"add", "sub", "mul", "icmp", "store"}:
            assert positions == [0, 1], full[i]

    # call edges pair with returns: the root calls every function once; a call site calls one entry and each of
    # the callee's exits (the nodes returning to the root) calls it back
    assert len([e for e in out[0] if e["flow"] == CALL]) == functions
    exits = defaultdict(set)
    for e in into[0]:
        assert e["flow"] == CALL
        exits[function[e["source"]]].add(e["source"])
    for site in range(1, len(nodes)):
        calls = [e for e in out[site] if e["flow"] == CALL]
        if calls:
            callee = function[calls[0]["target"]]
            assert text[site] == "call" or site in exits[function[site]], full[site]
            if text[site] == "call":
                returns = {e["source"] for e in into[site] if e["flow"] == CALL}
                assert returns == exits[callee], full[site]


@pytest.mark.parametrize("name", ["list_sort", "matmul", "state_machine", "sum_array"])
def test_invariants_on_examples(examples, name):
    graph = programl_json(examples[name])
    check_invariants(graph)
    counts = programl_counts(graph)
    assert counts["nodes"]["instruction"] == examples[name].instruction_count + 1 + \
        sum(n["text"] == "; undefined function" for n in graph["nodes"])


def test_sum_array_counts(examples):
    assert programl_counts(programl_json(examples["sum_array"])) == {
        "nodes": {"instruction": 67, "variable": 57, "constant": 9},
        "edges": {"control": 63, "data": 142, "call": 30}}


def _node_link_graph(data):
    """networkx's own reader, as CompilerGym calls it (the links key named where networkx >= 3.4 asks for it)."""
    major, minor = (int(p) for p in nx.__version__.split(".")[:2])
    links = {"edges": "links"} if (major, minor) >= (3, 4) else {}
    return nx.node_link_graph(data, directed=True, multigraph=True, **links)


def test_networkx_matches_node_link_graph(examples):
    data = json.loads(json.dumps(programl_json(examples["matmul"])))
    ours = programl_graph(examples["matmul"])
    reference = _node_link_graph(data)
    assert isinstance(ours, nx.MultiDiGraph) and ours.graph == reference.graph == data["graph"]
    assert dict(ours.nodes(data=True)) == dict(reference.nodes(data=True))
    assert sorted(ours.edges(keys=True, data=True), key=repr) == \
        sorted(reference.edges(keys=True, data=True), key=repr)
    assert ours.number_of_nodes() == len(data["nodes"])
    node = ours.nodes[1]
    assert set(node) == {"block", "features", "function", "text", "type"} and NODE_TYPES[node["type"]] == "instruction"
    assert {EDGE_FLOWS[d["flow"]] for _, _, d in ours.edges(data=True)} == {"control", "data", "call"}


def bpq(*args):
    return subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_cli():
    out = bpq("features", EXAMPLES / "sum_array.c", "--kind", "programl")
    assert out.returncode == 0, out.stderr
    assert "sum_array.c: 63 instructions, ProGraML graph of 133 nodes and 235 edges (5 functions)" in out.stdout
    assert "nodes: instruction 67, variable 57, constant 9" in out.stdout
    assert "edges: control 63, data 142, call 30" in out.stdout
    out = bpq("features", EXAMPLES / "sum_array.c", "--kind", "programl", "--json")
    assert out.returncode == 0, out.stderr
    graph = json.loads(out.stdout)
    assert graph["directed"] and graph["multigraph"] and len(graph["nodes"]) == 133 and len(graph["links"]) == 235
    assert _node_link_graph(graph).number_of_nodes() == 133
    instcount = json.loads(bpq("features", EXAMPLES / "sum_array.c", "--kind", "instcount", "--json").stdout)
    assert instcount["kind"] == "instcount" and instcount["features"]["TotalInstsCount"] == 63
    out = bpq("features", EXAMPLES / "sum_array.c", "--instcount", "--kind", "programl")
    assert out.returncode != 0 and "--instcount and --kind programl disagree" in out.stderr
