"""A new user's first ``bpq compile`` of outside projects: which program ``--program`` builds and what it is
called, the libraries a program links with (``--ldflags``, and those a compile database records), and link
errors that say what is missing.

Each test writes its own small C project and compile_commands.json: a CMake-like project of two programs whose
``main`` files are both ``main.c`` (as cmark's ``src/main.c`` and ``api_test/main.c``), programs that need zlib
(a system library) or a static ``libfoo.a`` the test builds outside ``/usr``."""

import json
import os
import subprocess
import sys

import pytest

from behavioral_pq.cli.common import error_line
from behavioral_pq.core.toolchain import check_link_flags, excerpt, find_tool, linker
from behavioral_pq.corpus.programs import compile_units, program_names, project_program, whole_programs
from behavioral_pq.errors import ToolError
from behavioral_pq.lowering.runs import RunInput

ZLIB_MAIN = ('#include <stdio.h>\nconst char *zlibVersion(void);\n'
             'int main(void) { printf("zlib %s\\n", zlibVersion()); return 0; }\n')


def bpq(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def error_lines(proc) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith("bpq: error:")]


@pytest.fixture(scope="module")
def zlib(tmp_path_factory):
    """A folder where a program linked with -lz builds (the distribution's zlib, which scripts/setup.sh installs:
    zlib1g-dev); without it the tests that need it fail, saying so."""
    folder = tmp_path_factory.mktemp("zlib")
    (folder / "z.c").write_text(ZLIB_MAIN)
    probe = subprocess.run([find_tool("clang"), str(folder / "z.c"), "-lz", "-o", str(folder / "z")],
                           capture_output=True, timeout=120)
    if probe.returncode != 0:
        pytest.fail("zlib (libz.so) is not installed: scripts/setup.sh installs zlib1g-dev")


def cmake_project(root, *, targets=True):
    """cmark's layout: ``src/main.c`` (the ``cmark`` executable) and ``api_test/main.c`` (``api_test``), both using
    ``lib/blocks.c``; a CMake compile database in ``build/`` (each object under ``CMakeFiles/TARGET.dir/``, or no
    ``-o`` at all without ``targets``)."""
    for folder, text in (("src", 'int main(void) { printf("cmark %d\\n", twice(3)); return 0; }\n'),
                         ("api_test", 'int main(void) { printf("api_test %d\\n", twice(5)); return 0; }\n')):
        (root / folder).mkdir(parents=True)
        (root / folder / "main.c").write_text("#include <stdio.h>\nint twice(int);\n" + text)
    (root / "lib").mkdir()
    (root / "lib" / "blocks.c").write_text("int twice(int x) { return 2 * x; }\n")
    (root / "build").mkdir()
    entries = []
    for source, target in (("src/main.c", "cmark"), ("api_test/main.c", "api_test"), ("lib/blocks.c", "libcmark")):
        output = ["-o", f"{os.path.dirname(source)}/CMakeFiles/{target}.dir/{os.path.basename(source)}.o"]
        entries.append({"directory": str(root / "build"), "file": str(root / source),
                        "arguments": ["/usr/bin/cc", "-O2", *(output if targets else []), "-c", str(root / source)]})
    database = root / "build" / "compile_commands.json"
    database.write_text(json.dumps(entries))
    return database


# -- 1. which program --program builds, and its name ---------------------------------------------------------------

def test_programs_are_named_by_their_build_target_and_a_shared_stem_is_refused(tmp_path, monkeypatch):
    """``--program main`` fitted both ``src/main.c`` and ``api_test/main.c`` and silently took the first; every
    output said "main" and the error listed "main" once for two programs. Now each program is named by its build
    target (CMake's ``CMakeFiles/NAME.dir``), taken by that name or its main file's path in the project, and a
    name that fits both is refused, listing them."""
    database = cmake_project(tmp_path / "proj")
    monkeypatch.chdir(tmp_path)
    cmark = project_program(database, "cmark")
    assert (cmark.name, cmark.source, cmark.units) == ("cmark", str(tmp_path / "proj/src/main.c"), 2)
    assert cmark.module.name == "cmark (2 units)"
    for name in ("src/main.c", "proj/src/main.c", str(tmp_path / "proj/src/main.c")):   # project, cwd, absolute
        assert project_program(database, name).source == cmark.source
    assert project_program(database, "api_test/main.c").name == "api_test"
    with pytest.raises(ValueError) as ambiguous:
        project_program(database, "main")
    assert "'main' fits 2 programs: api_test (api_test/main.c), cmark (src/main.c); give one of their names" \
        in str(ambiguous.value)
    with pytest.raises(ValueError) as unknown:
        project_program(database, "cmark-cli")
    assert "the programs there: api_test (api_test/main.c), cmark (src/main.c)" in str(unknown.value)


def test_programs_without_build_targets_are_named_by_their_path_in_the_project(tmp_path, monkeypatch):
    """A database that records no target (no ``-o``): two ``main.c`` are named ``api_test/main.c`` and
    ``src/main.c``, never "main" twice; a unique stem stays the name (``minigzip``)."""
    database = cmake_project(tmp_path / "proj", targets=False)
    monkeypatch.chdir(tmp_path)
    units, _ = compile_units(database)
    assert sorted(program_names(whole_programs(units))) == ["api_test/main.c", "src/main.c"]
    assert project_program(database, "src/main.c").module.name == "src/main.c (2 units)"
    with pytest.raises(ValueError, match=r"'main\.c' fits 2 programs: api_test/main\.c \(api_test/main\.c\), "
                                         r"src/main\.c \(src/main\.c\)"):
        project_program(database, "main.c")


def test_cli_compile_program_by_target_name_and_ambiguous_name(tmp_path):
    database = cmake_project(tmp_path / "proj")
    ambiguous = bpq("compile", "--compile-commands", database, "--program", "main", "-o", tmp_path / "x")
    assert ambiguous.returncode == 2 and len(error_lines(ambiguous)) == 1, ambiguous.stderr
    assert "fits 2 programs: api_test (api_test/main.c), cmark (src/main.c)" in ambiguous.stderr
    assert not (tmp_path / "x").exists()
    binary = tmp_path / "cmark"
    built = bpq("compile", "--compile-commands", database, "--program", "cmark", "--target", "measure", "-o", binary)
    assert built.returncode == 0, built.stderr
    assert "1. load       cmark (2 units)" in built.stdout and "verification: ok" in built.stdout
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "cmark 6\n"


# -- 2. link flags: --ldflags and those the database records ----------------------------------------------------

@pytest.fixture
def libfoo(tmp_path):
    """A static ``lib/libfoo.a`` (``foo_twice``) built here, outside ``/usr``, and ``app.c`` that needs it."""
    (tmp_path / "foo.c").write_text("int foo_twice(int x) { return 2 * x; }\n")
    (tmp_path / "lib").mkdir()
    subprocess.run([find_tool("clang"), "-c", str(tmp_path / "foo.c"), "-o", str(tmp_path / "foo.o")], check=True)
    subprocess.run([find_tool("llvm-ar"), "rcs", str(tmp_path / "lib/libfoo.a"), str(tmp_path / "foo.o")],
                   check=True)
    (tmp_path / "app.c").write_text('#include <stdio.h>\nint foo_twice(int);\n'
                                    'int main(void) { printf("%d\\n", foo_twice(21)); return 0; }\n')
    return tmp_path / "lib"


def test_ldflags_links_a_static_library_outside_usr_for_the_check_and_the_executable(tmp_path, libfoo):
    """``-L lib -lfoo`` (relative to the current folder): the checked run's link, inside the sandbox, sees the
    folder read-only; the executable links it too."""
    binary = tmp_path / "app"
    proc = bpq("compile", "app.c", "--ldflags", "-L lib -lfoo", "--target", "measure", "-o", binary, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "verification: ok" in proc.stdout
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "42\n"
    run = RunInput(link_flags=("-L", "lib", "-lfoo"), base=tmp_path)
    assert run.link_flags == (f"-L{libfoo}", "-lfoo")
    assert [(b.source, b.target, b.writable) for b in run.link_binds] == [(libfoo, libfoo, False)]
    assert RunInput(link_flags=("-L/usr/lib", "-lz")).link_binds == ()   # /usr is always shown


def test_link_errors_name_the_missing_symbols_and_ldflags_links_a_system_library(tmp_path, zlib):
    """Without the library the one error line said only "c2.o: in function `main':"; now it names the undefined
    symbol. ``--ldflags -lz`` (the value may start with a dash) links it."""
    (tmp_path / "z.c").write_text(ZLIB_MAIN)
    failed = bpq("compile", tmp_path / "z.c", "--target", "measure", "-o", tmp_path / "z")
    assert failed.returncode != 0 and len(error_lines(failed)) == 1, failed.stderr
    assert "undefined reference to `zlibVersion'" in error_lines(failed)[0]
    assert "linker command failed" not in failed.stderr and not (tmp_path / "z").exists()
    unchecked = bpq("compile", tmp_path / "z.c", "--target", "measure", "--no-verify", "-o", tmp_path / "z")
    assert unchecked.returncode != 0 and "undefined reference to `zlibVersion'" in error_lines(unchecked)[0]
    built = bpq("compile", tmp_path / "z.c", "--ldflags", "-lz", "--target", "measure", "-o", tmp_path / "z")
    assert built.returncode == 0 and "verification: ok" in built.stdout, built.stderr
    assert subprocess.run([str(tmp_path / "z")], capture_output=True, text=True).stdout.startswith("zlib 1.")


def test_a_compile_database_s_link_flags_are_used_and_its_link_output_names_the_program(tmp_path, libfoo, zlib):
    """An entry that compiles and links in one step (``cc -o hello hello.c -lz -L ../lib -lfoo``, as Make rules
    do and bear records): its ``-o`` names the program and its link flags (``-L`` relative to its directory) link
    it; a refused recorded flag (``-fuse-ld=gold``) is left out."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "main.c").write_text('#include <stdio.h>\nconst char *zlibVersion(void);\nint foo_twice(int);\n'
                                    'int main(void) { printf("%d %c\\n", foo_twice(4), zlibVersion()[0]); '
                                    "return 0; }\n")
    database = project / "compile_commands.json"
    database.write_text(json.dumps([{"directory": str(project), "file": "main.c", "arguments": [
        "cc", "-O2", "-o", "hello", "main.c", "-lz", "-L", "../lib", "-lfoo", "-fuse-ld=gold"]}]))
    found = project_program(database, "hello")
    assert found.name == "hello" and found.link_flags == ("-lz", f"-L{libfoo}", "-lfoo")
    binary = tmp_path / "hello"
    proc = bpq("compile", "--compile-commands", database, "--program", "hello", "--target", "measure", "-o", binary)
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "8 1\n"


@pytest.mark.parametrize("flags, named, why", [
    (["-Wl,-plugin,/tmp/evil.so"], "-Wl,-plugin,/tmp/evil.so", "loads code into the linker"),
    (["-Wl,--plugin=/tmp/evil.so"], "-Wl,--plugin=/tmp/evil.so", "loads code into the linker"),
    (["-fuse-ld=/tmp/ld"], "-fuse-ld=/tmp/ld", "run another linker"),
    (["-B/tmp/bin"], "-B/tmp/bin", "run other programs"),
    (["--sysroot=/tmp/root"], "--sysroot=/tmp/root", "system's libraries"),
    (["@/tmp/flags.rsp"], "@/tmp/flags.rsp", "reads more flags from a file"),
    (["-Xlinker", "-plugin"], "-Xlinker", "unchecked"),
    (["-Wl,--version-script=/etc/passwd"], "-Wl,--version-script=/etc/passwd", "not on the allow-list"),
    (["/tmp/libfoo.a"], "/tmp/libfoo.a", "give a library as -L DIR -l NAME"),
])
def test_link_flags_off_the_allow_list_are_refused_naming_the_flag(flags, named, why):
    with pytest.raises(ValueError) as info:
        check_link_flags(flags, what="--ldflags")
    message = str(info.value)
    assert message.startswith(f"--ldflags: refused link flag {named!r}: it ") and why in message
    assert "\n" not in message


def test_allowed_link_flags_and_where_they_go(tmp_path):
    allowed = ["-lz", "-l", "m", "-l:libfoo.a", "-pthread", "-rdynamic", "-static", "-Wl,--as-needed",
               "-Wl,-z,now", "-Wl,--gc-sections,-O1", "-Wl,-rpath,/opt/lib", "-L", str(tmp_path)]
    checked = check_link_flags(allowed)
    assert checked == ("-lz", "-lm", "-l:libfoo.a", "-pthread", "-rdynamic", "-static", "-Wl,--as-needed",
                       "-Wl,-z,now", "-Wl,--gc-sections,-O1", "-Wl,-rpath,/opt/lib", f"-L{tmp_path}")
    assert linker(False, ("-lz",))[1:] == ["-lz", "-lm"]          # after the objects, before libm
    with pytest.raises(FileNotFoundError, match="-L nowhere: no such folder"):
        check_link_flags(["-L", "nowhere"], base=tmp_path)
    with pytest.raises(ValueError, match="whole file system"):
        check_link_flags(["-L/"])


def test_cli_refuses_a_link_flag_before_any_work(tmp_path):
    source = tmp_path / "a.c"
    source.write_text("int main(void) { return 0; }\n")
    proc = bpq("compile", source, "--ldflags=-Wl,-plugin,/tmp/evil.so", "-o", tmp_path / "a")
    assert proc.returncode == 2 and error_lines(proc) == [
        "bpq: error: --ldflags: refused link flag '-Wl,-plugin,/tmp/evil.so': it loads code into the linker; "
        "allowed: -l NAME, -L DIR, -pthread, -rdynamic, -static, -static-libgcc, -pie, -no-pie and -Wl, options "
        "that only shape the executable (-Wl,--as-needed, -Wl,--gc-sections, -Wl,-z,now, -Wl,-rpath,DIR, ...)"]
    assert "1. load" not in proc.stdout and not (tmp_path / "a").exists()
    help_text = bpq("compile", "--help").stdout
    assert "--ldflags FLAGS" in help_text and "--ldflags=-lreadline" in help_text


# -- 3. error lines keep what failed -----------------------------------------------------------------------------

def test_error_line_keeps_the_lines_that_name_what_failed():
    output = ("/usr/bin/ld: /tmp/program-1.o: in function `main':\n"
              "program.s:(.text+0x17): undefined reference to `readline'\n"
              "program.s:(.text+0x2b): undefined reference to `add_history'\n"
              "/usr/bin/ld: cannot find -lfoo: No such file or directory\n"
              "clang-19: error: linker command failed with exit code 1 (use -v to see invocation)")
    line = error_line(ToolError(f"out: not written: clang-19 exited with 1: {output}"))
    assert line == ("bpq: error: out: not written: clang-19 exited with 1: /usr/bin/ld: /tmp/program-1.o: in "
                    "function `main': | program.s:(.text+0x17): undefined reference to `readline' | "
                    "program.s:(.text+0x2b): undefined reference to `add_history' | /usr/bin/ld: cannot find "
                    "-lfoo: No such file or directory")
    many = "\n".join(f"x.s:(.text+{i}): undefined reference to `f{i}'" for i in range(500))
    bounded = error_line(ToolError(f"link failed:\n{many}"))
    assert "\n" not in bounded and bounded.count("undefined reference") == 4 and len(bounded) < 1400
    assert error_line(ValueError("one line")) == "bpq: error: one line"
    # a long output cut by excerpt keeps its first undefined reference even past the head
    cut = excerpt("/usr/bin/ld: warning: w\n" * 200 + "x.s:(.text+0x1): undefined reference to `late'\n"
                  + "note\n" * 500)
    assert "undefined reference to `late'" in cut and "characters cut" in cut


# -- inputs checked before the search; runs that take longer than 10 s ----------------------------------------

SLOW_READER = ('#include <stdio.h>\n#include <unistd.h>\n'
               'int main(int argc, char **argv) {\n'
               '  FILE *f = fopen(argv[1], "r"); if (!f) { perror(argv[1]); return 1; }\n'
               '  usleep(MS * 1000); puts("done"); return 0; }\n')


def test_a_failing_reference_run_is_said_before_the_search(tmp_path):
    """A missing input stops compile --auto-passes before its first compilation (the search would take tens of
    seconds on a real program), as does a shell redirection in --run-args."""
    source = tmp_path / "reader.c"
    source.write_text("#define MS 0\n" + SLOW_READER)
    proc = bpq("compile", source, "--auto-passes", "--budget", "50", "--run-args", "missing.txt", "-o",
               tmp_path / "reader", cwd=tmp_path)
    assert proc.returncode == 1 and "missing.txt: No such file or directory" in proc.stderr
    assert "2. recommend" not in proc.stdout and "1. load" in proc.stdout
    (tmp_path / "in.txt").write_text("x\n")
    proc = bpq("compile", source, "--run-args", "< in.txt", "-o", tmp_path / "reader", cwd=tmp_path)
    assert proc.returncode == 2 and "give --stdin in.txt" in proc.stderr and "1. load" not in proc.stdout
    proc = bpq("compile", source, "--run-args", "in.txt", "-o", tmp_path / "reader", cwd=tmp_path)
    assert proc.returncode == 0 and "the -O0 reference runs with arguments in.txt: exit status 0, 5 bytes" \
        in proc.stdout and "verification: ok" in proc.stdout, proc.stderr


def test_run_timeout_bounds_the_checked_runs(tmp_path):
    source = tmp_path / "slow.c"
    source.write_text("#define MS 1500\n" + SLOW_READER)
    (tmp_path / "in.txt").write_text("x\n")
    proc = bpq("compile", source, "--run-args", "in.txt", "--run-timeout", "0.5", "-o", tmp_path / "slow",
               cwd=tmp_path)
    assert proc.returncode == 1 and "did not finish in" in proc.stderr and "--run-timeout SECONDS; now 0.5 s" \
        in proc.stderr
    proc = bpq("compile", source, "--run-args", "in.txt", "--run-timeout", "5", "-o", tmp_path / "slow",
               cwd=tmp_path)
    assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
    proc = bpq("compile", source, "--run-timeout", "nan", "-o", tmp_path / "slow", cwd=tmp_path)
    assert proc.returncode == 2 and "--run-timeout must be a positive number" in proc.stderr
