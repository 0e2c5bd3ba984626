"""Measure mode and target mode (behavioral_pq.core.target): what each does to the code, and what stays put."""

import json
import re

import pytest

import behavioral_pq as bpq
from behavioral_pq.cli.main import main
from behavioral_pq.core.target import Target, resolve_target
from behavioral_pq.errors import BPQError

LOOP = """
void scale(float *restrict out, const float *restrict in, float k, int n) {
  for (int i = 0; i < n; i++) out[i] = in[i] * k + 1.0f;
}
"""


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    path = tmp_path_factory.mktemp("target") / "scale.c"
    path.write_text(LOOP)
    return bpq.load_module(path)


def test_resolve_target():
    host = Target.host()
    assert host.triple.startswith("x86_64") and host.cpu and host.cpu != "generic"
    assert resolve_target(None) is None and resolve_target("measure") is None
    assert resolve_target("host") == host
    assert resolve_target("host", "x86-64-v3") == Target(host.triple, "x86-64-v3")
    assert resolve_target("x86_64-pc-linux-gnu") == Target("x86_64-pc-linux-gnu", "generic")
    with pytest.raises(ValueError):
        resolve_target("")


def test_target_mode_vectorizes_for_the_cpu_and_measure_mode_does_not(loop):
    measured = bpq.optimize(loop, "O3")
    targeted = bpq.optimize(loop, "O3", target=Target(Target.host().triple, "x86-64-v3"))
    assert "<8 x float>" in targeted.text() and "x float>" not in measured.text()
    assert '"target-cpu"="x86-64-v3"' in targeted.text()
    assert '"target-cpu"="x86-64"' in measured.text()               # what clang wrote stays in measure mode
    kept = bpq.optimize(loop, "O3", target=Target(Target.host().triple, ""))
    assert '"target-cpu"="x86-64"' in kept.text() and "<4 x float>" in kept.text()   # SSE2, as clang -O3
    assert bpq.optimize(loop, "O3").sha256 == measured.sha256           # measure mode is unchanged by it


def test_unknown_target_is_a_clear_error(loop):
    with pytest.raises(BPQError, match="unknown target"):
        bpq.optimize(loop, "O3", target=Target("nosuch-unknown-none", "generic"))


def test_cli_optimize_defaults_to_the_host_and_says_so(tmp_path, capsys):
    source = tmp_path / "scale.c"
    source.write_text(LOOP)
    assert main(["optimize", str(source), "--passes", "O3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["mode"] == "target" and record["target"]["cpu"] == Target.host().cpu
    assert main(["optimize", str(source), "--passes", "O3", "--json", "--target", "measure"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["mode"] == "measure" and record["target"] is None
    assert main(["optimize", str(source), "--passes", "O3", "--target", "measure", "--cpu", "znver4"]) == 2


def test_target_mode_lifts_the_unroll_ban_that_clang_O1_puts_on_loops(loop):
    assert "llvm.loop.unroll.disable" in loop.text()           # how the package compiles (clang -O1)
    targeted = bpq.optimize(loop, "O3", target="host")
    assert "llvm.loop.unroll.disable" not in targeted.text()
    assert "llvm.loop.unroll.disable" in bpq.optimize(loop, "O3").text()


def test_speed_objective_times_each_checked_build_and_keeps_o3_on_too_few_runs():
    from behavioral_pq.lowering.harness import TaskHarness
    from behavioral_pq.lowering.speed import SPEED_CANDIDATES, SpeedBackend
    from behavioral_pq.lowering.tasks import load_tasks

    task = next(t for t in load_tasks("kernels") if t.name == "dot_f64")
    backend = SpeedBackend(runs=2)
    with TaskHarness(task) as harness:
        lowering = backend.lower(task.module(), harness)
    assert lowering.verdict.ok
    tried = backend.last.tried
    assert sorted(label for label, _, _ in tried) == sorted(c.label for c in SPEED_CANDIDATES)
    assert "module CPU, fp-contract=on, -O2" in {c.label for c in SPEED_CANDIDATES}   # clang -O2's own build
    times = {label: median for label, median, stage in tried if stage == "ok"}
    assert len(times) == len(SPEED_CANDIDATES)
    # two runs per build cannot show a difference beyond the spread: the plain -O3 build is kept, and said why
    assert backend.last.chosen.label == "module CPU, fp-contract=on"
    assert backend.last.reason.startswith("kept -O3: 2 runs per build")


def test_lowering_report_says_which_build_the_speed_objective_chose():
    from behavioral_pq.lowering.speed import SPEED_CANDIDATES, SpeedBackend
    from behavioral_pq.lowering.tasks import load_tasks
    from behavioral_pq.reports import lowering as ev

    task = next(t for t in load_tasks("kernels") if t.name == "saxpy")
    outcome, = ev.evaluate_backend([task], SpeedBackend(runs=1), pipeline=None, measure=False)
    assert outcome.ok and outcome.build in {c.label for c in SPEED_CANDIDATES}
    assert ev.summarize([outcome])["builds"] == {outcome.build: 1}


def test_cli_compile_speed_objective_builds_a_checked_program(tmp_path, capsys):
    source = tmp_path / "prog.c"
    source.write_text(LOOP + """
#include <stdio.h>
int main(void) {
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = i * 0.5f;
  scale(out, in, 3.0f, 64);
  float s = 0;
  for (int i = 0; i < 64; i++) s += out[i];
  printf("%.1f\\n", s);
  return 0;
}
""")
    binary = tmp_path / "prog"
    assert main(["compile", str(source), "--objective", "speed", "--runs", "2", "-o", str(binary)]) == 0
    printed = capsys.readouterr().out
    assert "3. choose" in printed and binary.exists()
    import subprocess
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout.strip() == "3088.0"
    assert main(["compile", str(source), "--objective", "speed", "--passes", "O2", "-o", str(binary)]) == 2


def test_cli_compile_size_objective_keeps_the_modules_cpu(tmp_path, capsys):
    source = tmp_path / "lib.c"
    source.write_text(LOOP)
    assert main(["compile", str(source), "-o", str(tmp_path / "lib.o")]) == 0
    assert "target mode for the module CPU" in capsys.readouterr().out
    assert main(["compile", str(source), "--cpu", "x86-64-v3", "-o", str(tmp_path / "lib.o")]) == 0
    assert "target mode for x86-64-v3" in capsys.readouterr().out


def _size_marks(module) -> set:
    """The size attributes on the module's definitions' attribute groups ('minsize', 'optsize')."""
    import re

    text = module.text()
    groups = set(re.findall(r"^define [^{]*?#(\d+)", text, re.M))
    found = set()
    for number in groups:
        line = re.search(rf"^attributes #{number} = \{{(.*)\}}", text, re.M).group(1)
        found |= {mark for mark in ("minsize", "optsize") if re.search(rf"\b{mark}\b", line)}
    return found


def test_a_size_target_marks_every_definition_as_clang_marks_it_whatever_the_pipeline(loop):
    host = Target.host()
    plain = Target(host.triple, "")
    assert _size_marks(bpq.optimize(loop, "instcombine", target=plain)) == set()
    assert _size_marks(bpq.optimize(loop, "instcombine", target=Target(host.triple, "", size="Oz"))) == {
        "minsize", "optsize"}
    assert _size_marks(bpq.optimize(loop, "instcombine", target=Target(host.triple, "", size="Os"))) == {"optsize"}
    assert _size_marks(bpq.optimize(loop, "Oz", target=plain)) == {"minsize", "optsize"}   # a size level marks
    assert _size_marks(bpq.optimize(loop, "instcombine")) == set()                     # measure mode: none
    with pytest.raises(ValueError, match="target size must be one of"):
        Target(host.triple, "", size="O3")


def test_text_size_candidates_are_compiled_for_size_unless_they_are_a_size_level():
    from dataclasses import replace

    from behavioral_pq.tasks.guidance.trials import candidate_target

    plain = Target(Target.host().triple, "")
    assert candidate_target(plain, ("-instcombine", "-simplifycfg")) == replace(plain, size="Oz")
    assert candidate_target(plain, ("-Os", "-instcombine")) == plain        # -Os keeps its own optsize alone
    assert candidate_target(plain, ("-Oz",)) == plain
    assert candidate_target(None, ("-instcombine",)) is None                # measure mode
    assert candidate_target(replace(plain, size="Os"), ("-gvn",)) == replace(plain, size="Os")  # a user's choice


def test_optimize_size_marks_reproduces_what_a_text_size_search_compiled(loop, tmp_path, capsys):
    source = tmp_path / "scale.c"
    source.write_text(LOOP)
    out = tmp_path / "marked.ll"
    assert main(["optimize", str(source), "--passes", "instcombine", "--size-marks", "Oz", "--json",
                 "-o", str(out)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["target"]["size"] == "Oz"
    assert _size_marks(bpq.load_module(out)) == {"minsize", "optsize"}
    assert main(["optimize", str(source), "--passes", "instcombine", "--json", "-o", str(out), "--overwrite"]) == 0
    assert json.loads(capsys.readouterr().out)["target"]["size"] == ""
    assert _size_marks(bpq.load_module(out)) == set()
    for extra, message in ((["--target", "measure"], "needs target mode"), (["--auto"], "is for --passes")):
        args = ["optimize", str(source), "--size-marks", "Oz", *extra]
        if "--auto" not in extra:
            args += ["--passes", "instcombine"]
        assert main(args) == 2
        assert message in capsys.readouterr().err


FOUR = """#include <stdio.h>
int g1, g2, g3, g4, g5;
#define BODY(i) g1 = a * 7 + b; g2 = (a ^ b) * 13; g3 = p[a] + p[b] * 3; g4 = g1 * g2 - g3; g5 = p[g1 & 3] ^ g4; \\
                p[i] = g1 + g2 + g3 + g4 + g5; p[i] += a;
void f0(int *p, int a, int b) { BODY(0) }
void f1(int *p, int a, int b) { BODY(1) }
void f2(int *p, int a, int b) { BODY(2) }
void f3(int *p, int a, int b) { BODY(3) }
int main(void) {
  int a[4] = {1, 2, 3, 4};
  f0(a, 1, 2); f1(a, 2, 3); f2(a, 0, 1); f3(a, 3, 0);
  printf("%d %d %d %d %d\\n", a[0], a[1], a[2], a[3], g5);
  return 0;
}
"""


#: f forwards to an external function; g calls it three times. -Oz's size threshold inlines f, threshold 0 keeps it.
FORWARDER = """declare i32 @ext(i32)
define internal i32 @f(i32 %v) {
  %r = call i32 @ext(i32 %v)
  ret i32 %r
}
define i32 @g(i32 %x) {
  %a = call i32 @f(i32 %x)
  %b = call i32 @f(i32 %a)
  %c = call i32 @f(i32 %b)
  ret i32 %c
}
"""


CALLS_F = re.compile(r"call [^\n]*@f\(")


def test_oz_inline0_runs_oz_with_its_inliner_threshold_zero(engine):
    from behavioral_pq.core.catalog import steps_pipeline
    from behavioral_pq.core.engine import check_pipeline
    from behavioral_pq.errors import PipelineError

    module = bpq.load_module(FORWARDER, engine=engine)
    target = Target.module_cpus()
    for mode in (None, target):                                          # measure and target mode
        oz = bpq.optimize(module, "Oz", engine=engine, target=mode)
        low = bpq.optimize(module, "Oz-inline0", engine=engine, target=mode)
        assert not CALLS_F.search(oz.text()) and CALLS_F.search(low.text())
        assert low.instruction_count > oz.instruction_count
    assert steps_pipeline(("-Oz-inline0", "-gvn")) == "bpq-inline-threshold<0>,default<Oz>,function(gvn)"
    anywhere = bpq.optimize(module, "function(gvn),bpq-inline-threshold<0>,default<Oz>", engine=engine)
    assert CALLS_F.search(anywhere.text())                                     # one element, anywhere at the top
    for bad in ("bpq-inline-threshold<0>", "bpq-inline-threshold<x>,default<Oz>",
                "bpq-inline-threshold<-1>,default<Oz>", "bpq-inline-threshold<0>,bpq-inline-threshold<1>,default<Oz>",
                "module(bpq-inline-threshold<0>),default<Oz>"):
        with pytest.raises(PipelineError, match="bpq-inline-threshold"):
            check_pipeline(bad)


def test_oz_outline_outlines_what_functions_share_and_the_program_still_runs(tmp_path):
    from behavioral_pq.core.catalog import resolve_pipeline
    from behavioral_pq.core.toolchain import text_size

    assert resolve_pipeline("Oz-outline") == resolve_pipeline("-Oz-outline") == "default<Oz>,iroutliner,default<Oz>"
    source = tmp_path / "four.c"
    source.write_text(FOUR)
    module = bpq.load_module(source)
    target = Target.module_cpus()
    oz, outlined = bpq.optimize(module, "Oz", target=target), bpq.optimize(module, "Oz-outline", target=target)
    assert "outlined_ir_func" in outlined.text() and "outlined_ir_func" not in oz.text()
    assert text_size(outlined.bitcode) < 0.9 * text_size(oz.bitcode)           # 450 -> 333 bytes here
    binary = tmp_path / "four"
    assert main(["compile", str(source), "--passes", "Oz-outline", "-o", str(binary)]) == 0   # run, checked
    import subprocess
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "742 457 -2528 -218 -1100\n"


def test_a_text_size_search_tries_the_ir_outliner_second(tmp_path):
    from behavioral_pq.core.toolchain import text_size
    from behavioral_pq.tasks.guidance import recommend_pipeline

    source = tmp_path / "four.c"
    source.write_text(FOUR)
    module = bpq.load_module(source)
    target = Target.module_cpus()
    found = recommend_pipeline(module, 3, objective="text-size", target=target)
    assert [steps for steps, _ in found.tried[:2]] == [("-Os",), ("-Oz-outline",)]
    outlined = text_size(bpq.optimize(module, "Oz-outline", target=target).bitcode)
    assert found.tried[1][1] == outlined and found.text_size <= outlined < found.oz_text_size
