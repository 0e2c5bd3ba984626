"""Checked runs of whole programs: the files a user names reach the sandboxed run, a failed
reference run stops the check, the check compares stdout, stderr, exit status and written files, a bare run says so,
and failed timed runs are never ranked. Tiny C programs, llc only."""

import os
import re
import subprocess
import sys

import pytest

from behavioral_pq.core.module import load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import llc_assembly
from behavioral_pq.errors import ReferenceRunError, ToolError
from behavioral_pq.lowering import RunInput, lower
from behavioral_pq.lowering.harness import ProgramHarness
from behavioral_pq.cli.main import join_dash_values
from behavioral_pq.lowering import sandbox
from behavioral_pq.lowering.sandbox import Limits, Sandbox

HEADERS = "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n"

# Prints the file named by argv[1] (the first line holds a number of ms to sleep: the real run's work), and
# exits 1 when it cannot open it, as a real tool does.
READER = HEADERS + """
int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: reader FILE\\n"); return 2; }
  FILE *f = fopen(argv[1], "r");
  if (!f) { perror(argv[1]); return 1; }
  char line[256]; int ms = 0;
  while (fgets(line, sizeof line, f)) { if (!ms) ms = atoi(line); printf("read: %s", line); }
  usleep(ms * 1000);
  return 0;
}
"""


def bpq(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def program(tmp_path, name, text):
    source = tmp_path / f"{name}.c"
    source.write_text(text)
    return source


def assembly(source):
    return llc_assembly(optimize(load_module(source), "Oz").bitcode)


def test_a_file_outside_usr_is_invisible_unless_named(tmp_path):
    """tmp_path is under /tmp, which the sandbox keeps private: a run sees the file only when it is named."""
    data = tmp_path / "input.txt"
    data.write_text("secret\n")
    (tmp_path / "work").mkdir()
    box = Sandbox(tmp_path / "work")
    unseen = box.run(["/bin/cat", str(data)], timeout=10)
    assert unseen.returncode != 0 and b"No such file" in unseen.stderr
    seen = box.run(["/bin/cat", str(data)], timeout=10, binds=RunInput(args=(str(data),)).binds)
    assert seen.returncode == 0 and seen.stdout == b"secret\n"
    assert box.run(["/bin/sh", "-c", f"echo x > {data}"], timeout=10,
                   binds=RunInput(args=(str(data),)).binds).returncode != 0   # read-only
    assert data.read_text() == "secret\n"
    (tmp_path / "beside.txt").write_text("not named\n")   # only what is named: not the folder around it
    beside = box.run(["/bin/cat", str(tmp_path / "beside.txt")], timeout=10, binds=RunInput(args=(str(data),)).binds)
    assert beside.returncode != 0 and b"No such file" in beside.stderr


@pytest.mark.slow
def test_a_program_reading_a_file_outside_usr_is_checked_and_timed_on_its_real_run(tmp_path):
    """The issue's case: the input file lives in a temporary folder. Reference and build read it (their output
    holds its content), and the speed objective times the real run (it sleeps 250 ms), not the error exit of a
    run that cannot see the file (about 70 ms on a loaded machine)."""
    data = tmp_path / "data" / "input.txt"
    data.parent.mkdir()
    data.write_text("250 milliseconds\nsecond line\n")
    source = program(tmp_path, "reader", READER)
    module = load_module(source)
    with ProgramHarness(optimize(module, "Oz"), reference=module, run=RunInput(args=(str(data),))) as harness:
        assert harness.expected == "read: 250 milliseconds\nread: second line\n"
        assert harness.expected_status == 0 and harness.notes == ()
        asm = assembly(source)
        assert harness.check(asm).ok
        assert harness.timing(asm, runs=2).median_ns >= 250e6
    proc = bpq("compile", source, "--objective", "speed", "--runs", "2", "--run-args", data, "-o", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    assert "verification: ok" in proc.stdout and "note:" not in proc.stdout
    times = [float(t) for t in re.findall(r"^2\. build .*: ([\d.]+) ms$", proc.stdout, re.M)]
    assert len(times) == 4 and min(times) >= 250, proc.stdout
    # a path relative to the current folder reaches the run as typed
    proc = bpq("compile", source, "--run-args", "data/input.txt", "-o", tmp_path / "r", cwd=tmp_path)
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
    assert subprocess.run([tmp_path / "r", "data/input.txt"], capture_output=True, text=True,
                          cwd=tmp_path).stdout == "read: 250 milliseconds\nread: second line\n"
    proc = bpq("compile", source, "--run-args", "../data/input.txt", "-o", tmp_path / "r", cwd=tmp_path / "data")
    assert proc.returncode == 2 and "give it as an absolute path" in proc.stderr


def test_a_failing_reference_run_stops_compile_unless_its_status_is_expected(tmp_path):
    source = program(tmp_path, "fails", HEADERS + 'int main(void) { puts("partial");\n  fprintf(stderr, '
                                                  '"reader: cannot open the input\\n"); return 1; }\n')
    out = tmp_path / "fails"
    proc = bpq("compile", source, "-o", out)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "reference build cannot serve as the check" in proc.stderr
    assert "exited with status 1" in proc.stderr and "reader: cannot open the input" in proc.stderr
    assert "--expect-exit 1" in proc.stderr and not out.exists()
    proc = bpq("compile", source, "--expect-exit", "1", "-o", out)
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
    assert subprocess.run([out]).returncode == 1
    with pytest.raises(ReferenceRunError) as info:
        ProgramHarness(load_module(source))
    assert info.value.status == 1 and info.value.stderr == "reader: cannot open the input"
    with pytest.raises(ReferenceRunError, match="exited with status 1, not the 3 of --expect-exit"):
        ProgramHarness(load_module(source), run=RunInput(expect_exit=3))
    # the case: the file named does not exist, every run exits 1: no "verification: ok"
    reader = program(tmp_path, "reader", READER)
    proc = bpq("compile", reader, "--run-args", tmp_path / "missing.txt", "-o", out)
    assert proc.returncode == 1 and "No such file or directory" in proc.stderr and "verification" not in proc.stdout
    crash = program(tmp_path, "crash", "int main(void) { return *(volatile int *)0; }\n")
    with pytest.raises(ReferenceRunError, match=r"killed by signal 11 \(SIGSEGV\)") as info:
        ProgramHarness(load_module(crash), run=RunInput(expect_exit=0))
    assert info.value.status is None


def test_the_check_says_no_to_a_build_whose_output_differs(tmp_path):
    data = tmp_path / "input.txt"
    data.write_text("0\nsome text\n")
    source = program(tmp_path, "reader", READER)
    shouting = READER.replace('printf("read: %s", line)',
                              'for (char *c = line; *c; c++) *c = toupper(*c); printf("read: %s", line)')
    upper = program(tmp_path, "upper", "#include <ctype.h>\n" + shouting)
    module = load_module(source)
    with ProgramHarness(module, run=RunInput(args=(str(data),))) as harness:
        assert harness.check(assembly(source)).ok
        verdict = harness.check(assembly(upper))
        assert verdict.stage == "wrong-output" and "SOME TEXT" in verdict.message
        failed = harness.try_timings([assembly(source), assembly(upper)], runs=1)
        assert failed[0].median_ns > 0 and "fails its check (wrong-output)" in failed[1]
        with pytest.raises(ToolError, match="fails its check"):
            harness.timings([assembly(upper)], runs=1)
    # stderr is compared only when asked
    noisy = program(tmp_path, "noisy", READER.replace("usleep(ms * 1000);", 'fprintf(stderr, "extra\\n");'))
    with ProgramHarness(module, run=RunInput(args=(str(data),))) as harness:
        assert harness.check(assembly(noisy)).ok
    with ProgramHarness(module, run=RunInput(args=(str(data),), compare_stderr=True)) as harness:
        verdict = harness.check(assembly(noisy))
        assert verdict.stage == "wrong-output" and verdict.message.startswith("stderr:") and "extra" in verdict.message


WRITER = HEADERS + """
int main(void) {
  FILE *o = fopen("result.txt", "w");
  if (!o) return 1;
  for (int i = 1; i <= 3; i++) fprintf(o, "%d\\n", i * STEP);
  fclose(o);
  puts("done");
  return 0;
}
"""


def test_files_written_in_the_working_folder_are_compared(tmp_path):
    source = program(tmp_path, "writer", "#define STEP 2\n" + WRITER)
    other = program(tmp_path, "other", "#define STEP 3\n" + WRITER)
    silent = program(tmp_path, "silent", HEADERS + 'int main(void) { puts("done"); return 0; }\n')
    with ProgramHarness(load_module(source), run=RunInput(args=("x",))) as harness:
        assert set(harness.expected_files) == {"result.txt"}
        assert harness.expected_files["result.txt"].text == "2\n4\n6\n"
        assert harness.check(assembly(source)).ok
        verdict = harness.check(assembly(other))
        assert verdict.stage == "wrong-output" and verdict.message.startswith("file result.txt: ")
        verdict = harness.check(assembly(silent))
        assert verdict.stage == "wrong-output" and "did not write result.txt" in verdict.message
    with ProgramHarness(load_module(silent)) as harness:
        verdict = harness.check(assembly(source))
        assert verdict.stage == "wrong-output" and "wrote result.txt, which the reference did not" in verdict.message


@pytest.mark.slow
def test_a_bare_check_says_it_ran_with_no_arguments_and_empty_stdin(tmp_path):
    source = program(tmp_path, "hello", HEADERS + 'int main(void) { puts("hello"); return 0; }\n')
    proc = bpq("compile", source, "-o", tmp_path / "hello")
    assert proc.returncode == 0, proc.stderr
    assert "  note: the check ran the program with no arguments and empty stdin\n" in proc.stdout
    assert proc.stdout.count("note:") == 1
    proc = bpq("compile", source, "--run-args", "unused", "-o", tmp_path / "hello")
    assert proc.returncode == 0 and "note:" not in proc.stdout
    module = load_module(source)
    assert lower(module, verify=True).notes == ("the check ran the program with no arguments and empty stdin",)
    assert lower(module, verify=True, run=RunInput(args=("x",))).notes == ()
    quiet = program(tmp_path, "quiet", "int main(void) { return 0; }\n")
    notes = lower(load_module(quiet), verify=True, run=RunInput(args=("x",))).notes
    assert notes == ("the reference run printed nothing on stdout and wrote no files: the check compares only its "
                     "exit status (0)",)


def test_files_named_for_the_run_that_it_never_opens_are_noted(tmp_path):
    """Not a stop (an argument may name a file by coincidence), but said: the program ignores its argument."""
    data = tmp_path / "input.txt"
    data.write_text("1\n")
    hello = program(tmp_path, "hello", HEADERS + 'int main(void) { puts("hello"); return 0; }\n')
    assert lower(load_module(hello), verify=True, run=RunInput(args=(str(data),), folders=(tmp_path,))).notes == (
        f"the reference run never opened {data}, {tmp_path}, named for it: if it should read them, its arguments "
        "are not what it expects",)
    reader = program(tmp_path, "reader", READER)
    assert lower(load_module(reader), verify=True, run=RunInput(args=(str(data),))).notes == ()


def test_stdin_file_feeds_the_runs_and_an_unread_one_stops_the_check(tmp_path):
    numbers = tmp_path / "numbers.txt"
    numbers.write_text("".join(f"{i}\n" for i in range(1, 101)))
    source = program(tmp_path, "sum", HEADERS + 'int main(void) { long s = 0, x;\n'
                                                '  while (scanf("%ld", &x) == 1) s += x;\n'
                                                '  printf("%ld\\n", s); return 0; }\n')
    with ProgramHarness(load_module(source), run=RunInput(stdin=numbers)) as harness:
        assert harness.expected == "5050\n" and harness.check(assembly(source)).ok
    proc = bpq("compile", source, "--stdin", numbers, "-o", tmp_path / "sum")
    assert proc.returncode == 0 and "verification: ok" in proc.stdout and "note:" not in proc.stdout, proc.stderr
    proc = bpq("compile", source, "--stdin", tmp_path / "none.txt", "-o", tmp_path / "sum")
    assert proc.returncode == 2 and "none.txt: no such file" in proc.stderr
    deaf = program(tmp_path, "deaf", HEADERS + 'int main(void) { puts("42"); return 0; }\n')
    proc = bpq("compile", deaf, "--stdin", numbers, "-o", tmp_path / "deaf")
    assert proc.returncode == 1 and "did not read its stdin" in proc.stderr and "292 bytes" in proc.stderr


# argv[1]: a folder to read in.txt from (and that must stay read-only), argv[2]: a folder to write out.txt into.
COPIER = HEADERS + """
int main(int argc, char **argv) {
  char path[4096], line[256] = "";
  snprintf(path, sizeof path, "%s/in.txt", argv[1]);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(line, sizeof line, f)) { perror(path); return 1; }
  snprintf(path, sizeof path, "%s/stray.txt", argv[1]);
  if (fopen(path, "w")) { fprintf(stderr, "wrote into the read-only folder\\n"); return 3; }
  snprintf(path, sizeof path, "%s/out.txt", argv[2]);
  FILE *o = fopen(path, "w");
  if (!o) { perror(path); return 2; }
  fprintf(o, "copied: %s", line);
  fclose(o);
  puts("done");
  return 0;
}
"""


def test_run_dir_is_read_only_and_only_the_writable_dir_takes_writes(tmp_path):
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir(), outputs.mkdir()
    (inputs / "in.txt").write_text("payload\n")
    source = program(tmp_path, "copier", COPIER)
    out = tmp_path / "copier"
    proc = bpq("compile", source, "--run-args", f"{inputs} {outputs}", "-o", out)
    assert proc.returncode == 1 and "exited with status 2" in proc.stderr and "Read-only file system" in proc.stderr
    proc = bpq("compile", source, "--run-args", f"{inputs} {outputs}", "--writable-dir", outputs, "-o", out)
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
    # the runs wrote into copies of the writable folder: the user's folder is as it was
    assert not (outputs / "out.txt").exists() and not (inputs / "stray.txt").exists()
    # --run-dir shows a folder the program does not name in its arguments (here: a path compiled in)
    fixed = program(tmp_path, "fixed", HEADERS + f'int main(void) {{ FILE *f = fopen("{inputs}/in.txt", "r");\n'
                                                 '  if (!f) { perror("in.txt"); return 1; }\n'
                                                 '  char line[64]; fputs(fgets(line, 64, f), stdout); return 0; }\n')
    proc = bpq("compile", fixed, "-o", tmp_path / "fixed")
    assert proc.returncode == 1 and "No such file or directory" in proc.stderr
    proc = bpq("compile", fixed, "--run-dir", inputs, "-o", tmp_path / "fixed")
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
    # what a build writes in the writable folder is compared too
    other = program(tmp_path, "other", COPIER.replace('"copied: %s"', '"COPIED: %s"'))
    run = RunInput(args=(str(inputs), str(outputs)), writable=outputs)
    with ProgramHarness(load_module(source), run=run) as harness:
        assert harness.check(assembly(source)).ok
        verdict = harness.check(assembly(other))
        assert verdict.stage == "wrong-output" and verdict.message.startswith("file writable:out.txt: ")
        assert "COPIED" in verdict.message


def test_a_build_whose_timed_run_fails_is_not_ranked(tmp_path):
    """A program that exits 1 once its input says "fail": the input is changed after the build's check, so the
    check passes, its timed run fails, and it gets a reason instead of a time."""
    switch = tmp_path / "switch.txt"
    switch.write_text("pass\n")
    source = program(tmp_path, "switch", HEADERS + """
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "r"); char word[16] = {0};
  if (!f || !fgets(word, sizeof word, f)) return 9;
  puts("checked");
  return strncmp(word, "fail", 4) == 0;
}
""")
    with ProgramHarness(load_module(source), run=RunInput(args=(str(switch),))) as harness:
        check = harness.check

        def check_then_switch(text):
            verdict = check(text)
            switch.write_text("fail\n")   # in place: the run's read-only bind shows the new contents
            return verdict

        harness.check = check_then_switch
        result, = harness.try_timings([assembly(source)], runs=3)
    assert result == "a timed run exited with status 1, expected 0"


def test_run_input_refuses_what_it_cannot_show(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="the whole file system"):
        RunInput(args=("/",))
    with pytest.raises(ValueError, match="new empty folder"):
        RunInput(args=(".",), base=tmp_path)
    (tmp_path / "x.c").write_text("")
    with pytest.raises(NotADirectoryError):
        RunInput(folders=(tmp_path / "x.c",))
    with pytest.raises(ValueError, match="0..255"):
        RunInput(expect_exit=256)
    (tmp_path / "in.txt").write_text("x")
    run = RunInput(args=("--input=in.txt", "/usr/include", "-n", "3", "missing.txt"), base=tmp_path)
    assert [(str(b.source), str(b.target), b.writable) for b in run.binds] == [
        (str(tmp_path / "in.txt"), "in.txt", False)]
    assert run.given and not RunInput().given and RunInput().describe() == "no arguments and empty stdin"
    monkeypatch.chdir(tmp_path)
    assert RunInput(args=("in.txt",)).binds[0].source == tmp_path / "in.txt"


def test_compile_help_says_what_the_checked_runs_see():
    text = " ".join(bpq("compile", "--help").stdout.split())
    for words in ("--stdin FILE", "--run-dir DIR", "--writable-dir DIR", "--expect-exit N", "--compare-stderr",
                  "Other paths are not visible in the sandbox", "The reference run must succeed",
                  "runs the program with no arguments and empty stdin", "a build whose timed runs fail is never ranked"):
        assert words in text, words


# -- a failed check never ships; the whole output is compared; runs get their own writable folder; limits hold --

# -O0 prints 0 (INT_MAX + 1 wraps); -Oz folds x + 1 > x to 1 (signed overflow is undefined): the check must say no.
OVERFLOW = HEADERS + """
#include <limits.h>
int main(int argc, char **argv) {
  int x = INT_MAX - 1 + argc;
  printf("%d\\n", x + 1 > x);
  return 0;
}
"""


def test_a_build_that_fails_its_check_is_not_written(tmp_path):
    source = program(tmp_path, "overflow", OVERFLOW)
    out = tmp_path / "overflow"
    proc = bpq("compile", source, "--passes", "Oz", "-o", out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verification: wrong-output (stdout: line 1: expected '0', got '1')" in proc.stdout
    assert proc.stderr.count("\n") == 1 and "failed its check (wrong-output: stdout: line 1: expected '0', got '1')" \
        in proc.stderr and "nothing written" in proc.stderr and "--keep-unverified" in proc.stderr
    assert not out.exists()
    proc = bpq("compile", source, "--passes", "Oz", "-o", out, "--keep-unverified")
    assert proc.returncode == 0 and "written anyway" in proc.stderr and out.exists()
    s = tmp_path / "overflow.s"
    proc = bpq("lower", source, "--passes", "Oz", "--verify", "-o", s)
    assert proc.returncode == 1 and "failed its check (wrong-output" in proc.stderr and not s.exists()
    proc = bpq("lower", source, "--passes", "Oz", "--verify", "-o", s, "--keep-unverified")
    assert proc.returncode == 0 and s.exists()
    # a build that passes is written as before
    proc = bpq("compile", source, "--passes", "O0", "-o", out, "--overwrite")
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr


def test_output_past_the_first_mebibyte_is_compared(tmp_path):
    """Both builds print 1.5 MiB of the same lines; only their last line differs."""
    long = HEADERS + 'int main(void) { for (int i = 0; i < 150000; i++) printf("line %06d\\n", i); ' \
                     'printf("end %d\\n", END); return 0; }\n'
    same, other = program(tmp_path, "same", "#define END 0\n" + long), program(tmp_path, "other", "#define END 1\n" + long)
    with ProgramHarness(load_module(same)) as harness:
        assert harness.expected_streams[0].size > 1_500_000
        assert harness.check(assembly(same)).ok
        verdict = harness.check(assembly(other))
    assert verdict.stage == "wrong-output" and "stdout differs after its first 1,048,576 bytes" in verdict.message


APPENDER = HEADERS + """
int main(int argc, char **argv) {
  char path[512]; snprintf(path, sizeof path, "%s/log.txt", argv[1]);
  FILE *f = fopen(path, "a"); if (!f) return 3;
  fputs("run\\n", f); fclose(f);
  f = fopen(path, "r"); char line[64]; int n = 0;
  while (fgets(line, sizeof line, f)) n++;
  printf("%d lines\\n", n);
  if (DELETE) { snprintf(path, sizeof path, "%s/keep.txt", argv[1]); remove(path); }
  return 0;
}
"""


def test_every_run_works_on_its_own_copy_of_the_writable_folder(tmp_path):
    """A program appending to a log sees the user's log each time (a correct build is not judged wrong); a build
    that deletes a file is wrong; the user's folder is never touched."""
    room = tmp_path / "w"
    room.mkdir()
    (room / "keep.txt").write_text("precious\n")
    (room / "log.txt").write_text("old\n")
    appender = program(tmp_path, "appender", "#define DELETE 0\n" + APPENDER)
    deleter = program(tmp_path, "deleter", "#define DELETE 1\n" + APPENDER)
    with ProgramHarness(load_module(appender), run=RunInput(args=(str(room),), writable=room)) as harness:
        assert harness.expected == "2 lines\n"
        assert harness.expected_files["writable:log.txt"].text == "old\nrun\n"
        for _ in range(2):
            assert harness.check(assembly(appender)).ok
        verdict = harness.check(assembly(deleter))
        assert verdict.stage == "wrong-output" and "deleted writable:keep.txt" in verdict.message
    with ProgramHarness(load_module(deleter), run=RunInput(args=(str(room),), writable=room)) as harness:
        assert harness.check(assembly(deleter)).ok
        verdict = harness.check(assembly(appender))
        assert verdict.stage == "wrong-output" and "did not delete writable:keep.txt" in verdict.message
    assert (room / "keep.txt").read_text() == "precious\n" and (room / "log.txt").read_text() == "old\n"
    assert sorted(p.name for p in room.iterdir()) == ["keep.txt", "log.txt"]


def test_the_process_limit_holds_in_the_sandbox(tmp_path):
    """As root RLIMIT_NPROC does not apply; the sandbox holds Limits.processes with a pids cgroup."""
    forker = program(tmp_path, "forker", HEADERS + """
#include <sys/wait.h>
int main(void) {
  int made = 0;
  for (int i = 0; i < 1500; i++) { pid_t p = fork(); if (p == 0) { sleep(2); _exit(0); } if (p < 0) break; made++; }
  printf("forked %d\\n", made); fflush(stdout);
  while (wait(NULL) > 0) {}
  return 0;
}
""")
    binary = tmp_path / "work" / "forker"
    binary.parent.mkdir()
    subprocess.run(["clang-19", str(forker), "-o", str(binary)], check=True)
    box = Sandbox(binary.parent, Limits(processes=64))
    assert box.process_limit in ("cgroup", "rlimit")
    result = box.run([str(binary)], timeout=30)
    made = int(result.stdout.split()[1])
    assert result.returncode == 0 and 0 < made < 64, result.stdout
    sandbox._remove_leaving(10.0)   # cgroups whose processes were still leaving are removed later, or at exit
    hierarchy = sandbox._pids_hierarchy()
    assert hierarchy is None or not list(hierarchy.glob(f"bpq-sandbox-{os.getpid()}-*"))


def test_a_deep_folder_tree_left_by_a_run_is_compared_and_removed(tmp_path):
    digger = program(tmp_path, "digger", HEADERS + """
#include <sys/stat.h>
int main(void) {
  for (int i = 0; i < 1200; i++) { if (mkdir("d", 0755) || chdir("d")) return 4; }
  FILE *f = fopen("bottom.txt", "w"); fputs("deep\\n", f); fclose(f);
  puts("dug");
  return 0;
}
""")
    harness = ProgramHarness(load_module(digger))
    workdir = harness.workdir
    assert any("deeper than 64 levels" in f.digest for f in harness.expected_files.values())
    assert harness.check(assembly(digger)).ok
    harness.close()
    assert not workdir.exists()


def test_a_link_to_the_root_is_not_shown_to_the_run(tmp_path):
    link = tmp_path / "r"
    link.symlink_to("/")
    for run in (dict(folders=(link,)), dict(writable=link), dict(args=(str(link),))):
        with pytest.raises(ValueError, match="a link to /.*the whole file system"):
            RunInput(**run)


def test_a_one_letter_flag_with_its_path_is_shown_and_parsed(tmp_path):
    data = tmp_path / "in.txt"
    data.write_text("0\nhello\n")
    run = RunInput(args=(f"-i{data}",))
    assert [(b.source, b.target) for b in run.binds] == [(data, data)]
    assert join_dash_values(["compile", "a.c", "--run-args", f"-i{data}", "-o", "x"]) == \
        ["compile", "a.c", f"--run-args=-i{data}", "-o", "x"]
    assert join_dash_values(["compile", "a.c", "--run-args", "-n", "3"]) == ["compile", "a.c", "--run-args", "-n", "3"]
    source = program(tmp_path, "flagged", READER.replace("fopen(argv[1]", "fopen(argv[1] + 2"))
    for given in (["--run-args", f"-i{data}"], [f"--run-args=-i{data}"]):
        proc = bpq("compile", source, *given, "-o", tmp_path / "flagged", "--overwrite")
        assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr


def test_an_output_that_is_an_input_is_refused(tmp_path):
    source = program(tmp_path, "prog", HEADERS + 'int main(void) { puts("hi"); return 0; }\n')
    text = source.read_text()
    proc = bpq("compile", source, "-o", source)
    assert proc.returncode == 2 and "would replace the input" in proc.stderr
    proc = bpq("lower", source, "-o", source)
    assert proc.returncode == 2 and "would replace the input" in proc.stderr
    assert source.read_text() == text
    proc = bpq("compile", source, "--keep-assembly", "-o", tmp_path / "prog.s")
    assert proc.returncode == 2 and "--keep-assembly" in proc.stderr and not (tmp_path / "prog.s").exists()
