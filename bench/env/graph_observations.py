"""ProGraML graphs and inst2vec observations: CompilerGym 0.2.5 (its LLVM-10 service) against this package's
(LLVM 19), on the same C programs.

    python bench/env/graph_observations.py [--per-bucket 3] [--repeat 5] [--rounds 2] [--cpu 1]
                                           [--cgenv ~/.cache/cgenv] [--out DIR]

Programs: the package's examples and ``--per-bucket`` Csmith programs of each size bucket (200-1k and 1k-5k IR
instructions), drawn as bench/env/env_step.py draws them, compiled as it compiles them (clang-19 for this package,
clang-14 with ``noundef``/``mustprogress`` dropped for CompilerGym, both ``-O1 -Xclang -disable-llvm-passes
-g0``); and six small pointer-free modules written here in IR that both LLVM versions read alike, whose graphs
must be equal node for node and edge for edge.

Measured per program:

- ProGraML: node counts by type and edge counts by flow on each side; the instructions only one side has, by kind
  (pointer ``bitcast``, all-zero-index ``getelementptr``, other opcodes), and whether the count differences are
  what those instructions account for (one variable node and one control edge each; data edges 2 per bitcast, 4
  per two-index zero getelementptr); the constants only one side has, by kind.
- Time per graph: the ``ProgramlJson`` and ``Programl`` observations, each side in its own process pinned to one
  core (``--cpu``), ``--repeat`` times per round, ``--rounds`` rounds with the sides' order alternating; medians.
  CompilerGym runs without network (``unshare -n``), as ../shared/tools/compiler_gym_0.2.5.sh says.
- inst2vec: statement counts and the ``!UNK`` share of CompilerGym's ``Inst2vecEmbeddingIndices`` (LLVM 10), of
  this package's :func:`~behavioral_pq.core.inst2vec.inst2vec_indices` on the same LLVM 10 text (the same
  normalization and vocabulary, a check of the implementation), and on LLVM 19 without (``retype=False``) and with
  the opaque-pointer lookup.

Writes ``graph_observations.json`` and ``graph_observations.md`` under ``--out`` (default bench/env/results).
Without the CompilerGym venv it stops: every number here is a comparison with it.
"""

import argparse
import datetime
import difflib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

SIDE = Path(__file__).resolve().parent / "_graph_observations_side.py"
SIDES = ("compiler_gym", "shim")

#: Pointer-free modules whose ProGraML graphs LLVM 10 and LLVM 19 must give alike (their IR reads the same in both).
SMALL_MODULES = {
    "loop": """
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
""",
    "calls": """
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
""",
    "switch_recursion": """
declare i32 @ext(i32)

define i32 @square(i32 %a) {
entry:
  %m = mul i32 %a, %a
  %c = icmp sgt i32 %m, 100
  br i1 %c, label %big, label %small
big:
  ret i32 100
small:
  %s = add i32 1, 1
  %r = add i32 %m, %s
  ret i32 %r
}

define i32 @main(i32 %argc, i32 %unused) {
entry:
  %x = call i32 @square(i32 %argc)
  %y = call i32 @square(i32 %x)
  %z = call i32 @ext(i32 %y)
  switch i32 %z, label %def [ i32 0, label %zero
                              i32 1, label %zero
                              i32 2, label %two ]
zero:
  br i1 true, label %def, label %def
two:
  %sel = select i1 false, i32 %x, i32 7
  %rec = call i32 @main(i32 %sel, i32 undef)
  br label %def
def:
  %p = phi i32 [ 3, %entry ], [ 4, %zero ], [ 4, %zero ], [ %rec, %two ]
  %f = sitofp i32 %p to double
  %g = fmul double %f, 1.500000e+00
  %h = fptosi double %g to i32
  ret i32 %h
dead:
  %d = add i32 %argc, 2
  ret i32 %d
}
""",
    "aggregates": """
%pair = type { i32, i64 }

define i64 @second(%pair %p, <2 x i32> %v) {
entry:
  %a = extractvalue %pair %p, 1
  %b = insertvalue %pair zeroinitializer, i64 %a, 1
  %c = extractvalue %pair %b, 1
  %e = extractelement <2 x i32> %v, i32 0
  %w = sext i32 %e to i64
  %s = add i64 %c, %w
  %k = add <2 x i32> %v, <i32 1, i32 2>
  ret i64 %s
}

define void @nothing() {
  ret void
}
""",
    "profile_metadata": """
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
""",
    "integer_ops": """
define i64 @mix(i64 %a, i32 %b, float %f) {
entry:
  %t = trunc i64 %a to i32
  %u = udiv i32 %t, 3
  %s = shl i32 %u, %b
  %l = lshr i32 %s, 1
  %x = xor i32 %l, -1
  %o = or i32 %x, %b
  %z = zext i32 %o to i64
  %g = fcmp olt float %f, 0.5
  br i1 %g, label %neg, label %pos
neg:
  %n = sub i64 0, %z
  br label %out
pos:
  %q = icmp ult i64 %z, %a
  br i1 %q, label %out, label %never
never:
  unreachable
out:
  %r = phi i64 [ %n, %neg ], [ %z, %pos ]
  ret i64 %r
}
""",
}

COUNT_KEYS = [("nodes", "instruction"), ("nodes", "variable"), ("nodes", "constant"),
              ("edges", "control"), ("edges", "data"), ("edges", "call")]
_ZERO_INDEX = re.compile(r", i\d+ 0$")
_POINTER_OPERAND = re.compile(r"(\*|\bptr) \S+$")


# -- programs --------------------------------------------------------------------------------------------------

def prepare(tmp: Path, per_bucket: int):
    """[(name, kind ("example", "csmith", "small"), this package's Module, its bitcode, LLVM 10's bitcode)]."""
    import behavioral_pq as bpq
    from behavioral_pq.corpus.csmith import CSMITH_INCLUDE
    from env_step import llvm10_bitcode, programs

    flags = ["-w", f"-I{CSMITH_INCLUDE}"]
    prepared = []
    for name, source in programs(tmp, per_bucket):
        module = bpq.load_module(source, flags=flags)
        prepared.append((name, "csmith" if name.startswith("csmith-") else "example", module,
                         module.save(tmp / f"{name}.bc"), llvm10_bitcode(source, tmp / f"{name}.llvm10.bc")))
    for name, ir in SMALL_MODULES.items():
        module = bpq.load_module(ir)
        theirs = tmp / f"{name}.llvm10.bc"
        subprocess.run(["llvm-as-14", "-", "-o", str(theirs)], input=ir, text=True, check=True, timeout=60)
        prepared.append((name, "small", module, module.save(tmp / f"{name}.bc"), theirs))
    return prepared


def run_side(side: str, programs, repeat: int, cpu: int, cgenv: Path) -> dict:
    request = json.dumps({"side": side, "repeat": repeat, "programs": programs})
    command = common.side_command(side, SIDE, cpu, cgenv)
    env = {**os.environ, "BPQ_WORKERS": "1"} if side == "compiler_gym" else common.checkout_env(BPQ_WORKERS="1")
    done = subprocess.run(command, input=request, capture_output=True, text=True, timeout=3600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{side}: {done.stderr.strip()[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- ProGraML --------------------------------------------------------------------------------------------------

def full_text(node) -> str:
    return node.get("features", {}).get("full_text", [""])[0]


def instruction_kind(text: str) -> str:
    """``"pointer bitcast"`` (pointer to pointer), ``"zero getelementptr"`` (every index a constant 0), else the
    opcode, of an instruction node's full text."""
    body = text.split(" = ", 1)[-1]
    opcode = body.split(" ", 1)[0]
    if opcode == "bitcast" and " to " in body:
        source, target = body[len("bitcast "):].rsplit(" to ", 1)
        source_type = source.rsplit(" ", 1)[0]
        if (source_type.endswith("*") or source_type == "ptr") and (target.endswith("*") or target == "ptr"):
            return "pointer bitcast"
    if opcode == "getelementptr":
        rest, indices = body, 0
        while _ZERO_INDEX.search(rest):
            rest, indices = _ZERO_INDEX.sub("", rest), indices + 1
        if indices and _POINTER_OPERAND.search(rest):
            return "zero getelementptr"
    return opcode


def constant_kind(text: str) -> str:
    """A constant node's kind by its full text: a global's definition, a null pointer, a constant expression, or a
    plain value."""
    if text.startswith("@"):
        return "global"
    if text.endswith(" null"):
        return "null pointer"
    if "(" in text:
        return "expression"
    return "value"


def instruction_kinds(graph) -> Counter:
    return Counter(instruction_kind(full_text(n)) for n in graph["nodes"][1:] if n["type"] == 0)


def graph_difference(theirs, ours) -> dict:
    """How two graphs of one program differ, and whether the instructions only LLVM 10 has account for it."""
    from behavioral_pq.core.programl import programl_counts

    counts = {"compiler_gym": programl_counts(theirs), "ours": programl_counts(ours)}
    gap = {f"{a}.{b}": counts["compiler_gym"][a][b] - counts["ours"][a][b] for a, b in COUNT_KEYS}
    kinds10, kinds19 = instruction_kinds(theirs), instruction_kinds(ours)
    by_kind = {k: kinds10[k] - kinds19[k] for k in sorted(set(kinds10) | set(kinds19)) if kinds10[k] != kinds19[k]}
    bitcasts = by_kind.get("pointer bitcast", 0)
    zero_geps = by_kind.get("zero getelementptr", 0)
    others = {k: v for k, v in by_kind.items() if k not in ("pointer bitcast", "zero getelementptr")}
    data_expected = 2 * bitcasts + 4 * zero_geps
    removed = gap["nodes.instruction"]
    return {
        "counts": counts, "gap": gap,
        "pointer_bitcasts": {"llvm10": kinds10["pointer bitcast"], "llvm19": kinds19["pointer bitcast"]},
        "zero_geps": {"llvm10": kinds10["zero getelementptr"], "llvm19": kinds19["zero getelementptr"]},
        "other_opcode_gaps": others,
        "instructions_explained": removed == bitcasts + zero_geps and not others,
        "variables_follow": gap["nodes.variable"] == removed,
        "control_follows": gap["edges.control"] == removed,
        "data_expected": data_expected,
        "data_follows": gap["edges.data"] == data_expected,
        "calls_equal": gap["edges.call"] == 0,
        "constants": {side: dict(sorted(Counter(constant_kind(full_text(n)) for n in graph["nodes"]
                                                if n["type"] == 2).items()))
                      for side, graph in (("llvm10", theirs), ("llvm19", ours))},
    }


def canonical(graph):
    """A graph as multisets that ignore node numbering: nodes by (type, text, full text, function, block), edges by
    (flow, position, source node, target node), and the function list."""
    nodes = {n["id"]: (n["type"], n["text"], tuple(n.get("features", {}).get("full_text", ["<none>"])),
                       n["function"], n["block"]) for n in graph["nodes"]}
    edges = Counter((e["flow"], e["position"], nodes[e["source"]], nodes[e["target"]]) for e in graph["links"])
    return Counter(nodes.values()), edges, graph["graph"]["function"]


# -- inst2vec --------------------------------------------------------------------------------------------------

def per_line(statements):
    """Joined statements (a switch with its cases, an invoke with its ``to label``) split as CompilerGym 0.2.5
    preprocesses them, a line at a time."""
    out = []
    for statement in statements:
        parts = statement.split("\n ")
        if len(parts) > 1 and parts[0].startswith("switch"):
            parts[-1] = parts[-1][:-1]
        if statement.startswith("switch") and statement.endswith("[]"):
            parts = [statement[:-1]]
        out += parts
    return out


def inst2vec_row(module, cg: dict, vocabulary) -> dict:
    """Statement and ``!UNK`` counts: CompilerGym's (LLVM 10), ours on its LLVM 10 text, ours on LLVM 19 without
    and with the opaque-pointer lookup."""
    from behavioral_pq.core.inst2vec import inst2vec_indices, preprocess_ir

    unknown = vocabulary.unknown
    count = lambda rows: {"statements": len(rows), "unknown": int(sum(int(i) == unknown for i in rows))}
    row = {"ours19_raw": count(inst2vec_indices(module, retype=False, vocabulary=vocabulary)),
           "ours19_retyped": count(inst2vec_indices(module, vocabulary=vocabulary))}
    if "inst2vec_error" in cg:
        row["compiler_gym_error"] = cg["inst2vec_error"]
        return row
    ours10 = preprocess_ir(cg["Ir"])
    lines10 = per_line(ours10)
    matcher = difflib.SequenceMatcher(a=lines10, b=cg["Inst2vecPreprocessedText"], autojunk=False)
    row["compiler_gym"] = count(cg["Inst2vecEmbeddingIndices"])
    row["ours10"] = {**count([vocabulary.index(s, retype=False) for s in ours10]), "lines": len(lines10),
                     "lines_equal": sum(block.size for block in matcher.get_matching_blocks())}
    return row


# -- the run ---------------------------------------------------------------------------------------------------

def median_ms(replies, key):
    return 1e3 * statistics.median(s for reply in replies for s in reply[key])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-bucket", type=int, default=3, help="Csmith programs per size bucket (200-1k, 1k-5k)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per observation, program and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cpu", type=int, default=1, help="the core both sides are pinned to")
    parser.add_argument("--cgenv", type=Path, default=Path.home() / ".cache" / "cgenv")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()
    if not (args.cgenv / "bin" / "python").exists():
        sys.exit(f"no CompilerGym venv at {args.cgenv}: bash ../shared/tools/compiler_gym_0.2.5.sh makes one")

    from behavioral_pq.core.inst2vec import load_vocabulary
    from behavioral_pq.core.programl import programl_json

    vocabulary = load_vocabulary()
    with tempfile.TemporaryDirectory(prefix="bpq-graph-obs-") as tmp:
        tmp = Path(tmp)
        prepared = prepare(tmp, args.per_bucket)
        replies = {side: [] for side in SIDES}
        for r in range(args.rounds):
            for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                request = [{"name": name, "bitcode": str(theirs if side == "compiler_gym" else ours),
                            "dump": str(tmp / f"{name}.{side}.json")}
                           for name, _, _, ours, theirs in prepared]
                replies[side].append(run_side(side, request, args.repeat, args.cpu, args.cgenv))
                print(f"round {r + 1}: {side} done", flush=True)
        rows = []
        for name, kind, module, _, _ in prepared:
            theirs = json.loads((tmp / f"{name}.compiler_gym.json").read_text())
            ours = programl_json(module)
            if json.loads((tmp / f"{name}.shim.json").read_text()) != json.loads(json.dumps(ours)):
                raise RuntimeError(f"{name}: the shim's ProgramlJson is not programl_json's")
            cg = [reply[name] for reply in replies["compiler_gym"]]
            sh = [reply[name] for reply in replies["shim"]]
            row = {"program": name, "kind": kind, "instructions": module.instruction_count,
                   "graph": graph_difference(theirs, ours),
                   "networkx": {"compiler_gym": [cg[0]["graph_nodes"], cg[0]["graph_edges"]],
                                "ours": [sh[0]["graph_nodes"], sh[0]["graph_edges"]]},
                   "ms": {"compiler_gym": {"ProgramlJson": median_ms(cg, "ProgramlJson_s"),
                                           "Programl": median_ms(cg, "Programl_s")},
                          "ours": {"ProgramlJson": median_ms(sh, "ProgramlJson_s"),
                                   "Programl": median_ms(sh, "Programl_s"),
                                   "programl_json": median_ms(sh, "programl_json_s"),
                                   "programl_graph": median_ms(sh, "programl_graph_s")}}}
            if kind == "small":
                a, b = canonical(theirs), canonical(ours)
                row["equal"] = {"nodes": a[0] == b[0], "edges": a[1] == b[1], "functions": a[2] == b[2]}
            else:
                row["inst2vec"] = inst2vec_row(module, cg[0], vocabulary)
            rows.append(row)
            print(f"{name:18s} {row['instructions']:5d} ins  gap {row['graph']['gap']}  "
                  f"ms CG {row['ms']['compiler_gym']['ProgramlJson']:.1f} ours {row['ms']['ours']['ProgramlJson']:.1f}",
                  flush=True)
    import behavioral_pq as bpq

    result = {"command": " ".join(["python", "bench/env/graph_observations.py", *sys.argv[1:]]),
              "date": datetime.date.today().isoformat(), "machine": common.machine(),
              "load_average": os.getloadavg(), "behavioral_pq": bpq.__version__, "compiler_gym": "0.2.5",
              "per_bucket": args.per_bucket, "repeat": args.repeat, "rounds": args.rounds, "cpu": args.cpu,
              "programs": rows}
    out = common.write_json(args.out / "graph_observations.json", result)
    markdown = report(result)
    common.write_text(args.out / "graph_observations.md", markdown)
    print(markdown)
    print(f"wrote {out}")


# -- the report ------------------------------------------------------------------------------------------------

def _pair(a, b) -> str:
    return f"{a} / {b}"


def _speedup(theirs: float, ours: float) -> str:
    return f"{theirs / ours:.1f}x"


def report(result) -> str:
    programs = [r for r in result["programs"] if r["kind"] != "small"]
    small = [r for r in result["programs"] if r["kind"] == "small"]
    lines = ["# ProGraML and inst2vec: CompilerGym 0.2.5 (LLVM 10) against behavioral_pq (LLVM 19)", "",
             f"`{result['command']}`, {result['date']}, {result['machine']} (shared with other jobs; load average "
             f"{result['load_average'][0]:.1f} at the end), each side pinned to CPU {result['cpu']}. Cells: "
             "CompilerGym / ours.", "", "## ProGraML node and edge counts", ""]
    header = ["program", "IR instructions (19)"] + [f"{b} {a[:-1]}s" for a, b in COUNT_KEYS] + \
        ["pointer bitcasts (10)", "zero GEPs 10 / 19"]
    body = []
    for r in programs:
        g = r["graph"]
        body.append([r["program"], r["instructions"]]
                    + [_pair(g["counts"]["compiler_gym"][a][b], g["counts"]["ours"][a][b]) for a, b in COUNT_KEYS]
                    + [g["pointer_bitcasts"]["llvm10"], _pair(g["zero_geps"]["llvm10"], g["zero_geps"]["llvm19"])])
    lines += [common.markdown_table(header, body, "lr" + "r" * (len(header) - 2)), ""]

    lines += ["## What the differences are", "",
              "Gap: CompilerGym's count minus ours. Pointer bitcasts and zero GEPs: how many more LLVM 10 has "
              "(every index a constant 0); other opcodes: any other instruction count that differs. Expected data "
              "gap: 2 per pointer bitcast + 4 per zero GEP. Constants by kind (a global's definition, a null "
              "pointer, a constant expression, a plain value): LLVM 10 -> LLVM 19.", ""]
    header = ["program", "instruction gap", "pointer bitcasts + zero GEPs", "other opcodes", "variable gap",
              "control gap", "data gap (expected)", "call gap", "constants by kind, 10 -> 19"]
    body = []
    for r in programs:
        g = r["graph"]
        gap = g["gap"]
        bitcasts = g["pointer_bitcasts"]["llvm10"] - g["pointer_bitcasts"]["llvm19"]
        zero = g["zero_geps"]["llvm10"] - g["zero_geps"]["llvm19"]
        kinds = lambda d: ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "-"
        body.append([r["program"], gap["nodes.instruction"], f"{bitcasts} + {zero}",
                     kinds(g["other_opcode_gaps"]), gap["nodes.variable"], gap["edges.control"],
                     f"{gap['edges.data']} ({g['data_expected']})", gap["edges.call"],
                     ", ".join(f"{k} {g['constants']['llvm10'].get(k, 0)} -> {g['constants']['llvm19'].get(k, 0)}"
                               for k in ("global", "expression", "null pointer", "value"))])
    lines += [common.markdown_table(header, body, "lrrlrrrr"), ""]
    checks = ("instructions_explained", "variables_follow", "control_follows", "data_follows", "calls_equal")
    for check in checks:
        failing = [r["program"] for r in programs if not r["graph"][check]]
        lines.append(f"- {check.replace('_', ' ')}: " + ("all programs" if not failing else
                                                         f"not on {', '.join(failing)}"))
    lines += ["", "Pointer-free modules written in IR (node and edge multisets, and the function list):", ""]
    for r in small:
        equal = all(r["equal"].values())
        lines.append(f"- {r['program']}: " + ("equal" if equal else f"DIFFERENT {r['equal']}") +
                     f" ({sum(r['graph']['counts']['ours']['nodes'].values())} nodes, "
                     f"{sum(r['graph']['counts']['ours']['edges'].values())} edges)")

    lines += ["", "## Time per graph (ms, median)", "",
              "The observation asked of an environment after `reset` (CompilerGym: its service builds the graph and "
              "sends it; ours: the shim, the graph built by the native core in-process). `programl_json` is the "
              "package's function on a loaded module, without an environment.", ""]
    header = ["program", "nodes (19)", "CG ProgramlJson", "ours ProgramlJson", "speedup", "CG Programl",
              "ours Programl", "speedup", "programl_json"]
    body = []
    for r in programs:
        cg, us = r["ms"]["compiler_gym"], r["ms"]["ours"]
        body.append([r["program"], sum(r["graph"]["counts"]["ours"]["nodes"].values()),
                     f"{cg['ProgramlJson']:.1f}", f"{us['ProgramlJson']:.1f}",
                     _speedup(cg["ProgramlJson"], us["ProgramlJson"]),
                     f"{cg['Programl']:.1f}", f"{us['Programl']:.1f}", _speedup(cg["Programl"], us["Programl"]),
                     f"{us['programl_json']:.1f}"])
    gm = {key: common.geomean(r["ms"]["compiler_gym"][key] / r["ms"]["ours"][key] for r in programs)
          for key in ("ProgramlJson", "Programl")}
    body.append(["**geomean speedup**", "", "", "", f"**{gm['ProgramlJson']:.1f}x**", "", "",
                 f"**{gm['Programl']:.1f}x**", ""])
    lines += [common.markdown_table(header, body, "lrrrrrrrr"), ""]

    lines += ["## inst2vec", "",
              "Statements and `!UNK` share. CompilerGym: `Inst2vecEmbeddingIndices` on LLVM 10. Ours on LLVM 10: "
              "this package's normalization and lookup (without the opaque-pointer remedy) on CompilerGym's own "
              "`Ir` text; `lines equal`: how many of CompilerGym's "
              "`Inst2vecPreprocessedText` statements ours equal, in order, once ours are split a line at a time as "
              "CompilerGym splits them (a switch and its cases). Ours on LLVM 19: `inst2vec_indices(module, "
              "retype=False)` (without the remedy) and `inst2vec_indices(module)` (with it).", ""]
    header = ["program", "statements CG (10)", "statements ours (10)", "lines equal", "statements ours (19)",
              "!UNK CG (10)", "!UNK ours (10)", "!UNK ours (19), no remedy", "!UNK ours (19), remedy"]
    share = lambda c: f"{c['unknown'] / c['statements']:.3f}" if c["statements"] else "-"
    body, totals = [], {key: Counter() for key in ("compiler_gym", "ours10", "ours19_raw", "ours19_retyped")}
    for r in programs:
        i = r["inst2vec"]
        if "compiler_gym_error" in i:
            body.append([r["program"], i["compiler_gym_error"], "", "", i["ours19_raw"]["statements"], "", "",
                         share(i["ours19_raw"]), share(i["ours19_retyped"])])
            continue
        body.append([r["program"], i["compiler_gym"]["statements"], i["ours10"]["statements"],
                     f"{i['ours10']['lines_equal']}/{i['compiler_gym']['statements']}", i["ours19_raw"]["statements"],
                     share(i["compiler_gym"]), share(i["ours10"]), share(i["ours19_raw"]), share(i["ours19_retyped"])])
        for key, total in totals.items():
            total.update({"statements": i[key]["statements"], "unknown": i[key]["unknown"]})
    if totals["compiler_gym"]["statements"]:
        body.append(["**all statements**", totals["compiler_gym"]["statements"], totals["ours10"]["statements"], "",
                     totals["ours19_raw"]["statements"], f"**{share(totals['compiler_gym'])}**",
                     share(totals["ours10"]), f"**{share(totals['ours19_raw'])}**",
                     f"**{share(totals['ours19_retyped'])}**"])
    lines += [common.markdown_table(header, body, "lrrrrrrrr"), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
