"""Hostile inputs, second campaign: each probe of the outside campaign is a test here, in one section per
kind of input, refused with a typed error, at once."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import plant_plugin

import behavioral_pq as bpq
from behavioral_pq.core.toolchain import compile_to_bitcode
from behavioral_pq.corpus import from_compile_commands
from behavioral_pq.corpus.inputs import module_from_compile_commands, recorded_flags
from behavioral_pq.errors import BPQError, CompileError

REPO = Path(__file__).resolve().parent.parent
CHECKPOINTS = REPO / "checkpoints"


def bpq_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


# == compile databases ============================================================================================
#
# A compile_commands.json is a third-party file: its flags are taken only when they are on the allow-list
# (behavioral_pq.corpus.inputs.recorded_flags); every probe below ran code, read flags from a file or wrote a file
# through clang on the deny-list it replaced. Each asserts the refusal names the flag, and that nothing ran and
# nothing was written: the planted plugin (a shared library whose constructor writes a marker when anything loads
# it) and the planted assembler (DIR/as, which writes another marker) leave no marker, and the folder holds the
# same files after as before.

SECRET = "root:x:0:0:TOPSECRET-LINE"


@pytest.fixture()
def hostile(tmp_path):
    """A folder with a unit, a planted plugin and assembler, the files that hand clang more flags, and a secret."""
    folder = tmp_path / "proj"
    (folder / "bin").mkdir(parents=True)
    plant_plugin(folder, tmp_path / "PLUGIN-RAN")
    (folder / "bin" / "as").write_text(f"#!/bin/sh\ntouch {tmp_path / 'AS-RAN'}\nexit 1\n")
    (folder / "bin" / "as").chmod(0o755)
    (folder / "plug.rsp").write_text(f"-fplugin={folder / 'evil.so'}\n")
    (folder / "plug.cfg").write_text(f"-fplugin={folder / 'evil.so'}\n")
    (folder / "secret").write_text(SECRET + "\n")
    return folder


def database(folder: Path, *flags: str, file: str = "a.c") -> Path:
    db = folder / "compile_commands.json"
    db.write_text(json.dumps([{"directory": str(folder), "file": file, "arguments": ["cc", *flags, "-c", file]}]))
    return db


def files_under(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# (probe, flags given, the flag the refusal names, a word of its reason)
PROBES = [
    ("response file", ["@plug.rsp"], "@plug.rsp", "response file"),
    ("config file", ["--config={folder}/plug.cfg"], "--config={folder}/plug.cfg", "configuration file"),
    ("Xclang= load", ["-Xclang=-load", "-Xclang={folder}/evil.so"], "-Xclang=-load", "front end"),
    ("Xclang load", ["-Xclang", "-load", "-Xclang", "{folder}/evil.so"], "-Xclang -load", "front end"),
    ("Wp load", ["-Wp,-load,{folder}/evil.so"], "-Wp,-load,{folder}/evil.so", "preprocessor"),
    ("prefix assembler", ["--prefix={folder}/bin/", "-x", "assembler", "-fno-integrated-as"],
     "--prefix={folder}/bin/", "run other programs"),
    ("no integrated as", ["-fno-integrated-as"], "-fno-integrated-as", "run other programs"),
    ("mllvm", ["-mllvm", "-debug-pass=Structure"], "-mllvm -debug-pass=Structure", "LLVM"),
    ("time trace", ["-ftime-trace={folder}/trace.json"], "-ftime-trace={folder}/trace.json", "write files"),
    ("proc stat report", ["-fproc-stat-report={folder}/stats.txt"], "-fproc-stat-report={folder}/stats.txt",
     "write files"),
    ("optimization record", ["-foptimization-record-file={folder}/remarks.yaml"],
     "-foptimization-record-file={folder}/remarks.yaml", "write files"),
    ("save optimization record", ["-fsave-optimization-record"], "-fsave-optimization-record", "write files"),
    ("crash diagnostics dir", ["-fcrash-diagnostics-dir={folder}/crash"], "-fcrash-diagnostics-dir=", "write"),
    ("compile database entry", ["-MJ", "{folder}/entry.json"], "-MJ {folder}/entry.json", "write files"),
    ("plugin", ["-fplugin={folder}/evil.so"], "-fplugin={folder}/evil.so", "loads code"),
    ("relative plugin", ["-fplugin=evil.so"], "-fplugin=evil.so", "loads code"),
    ("pass plugin", ["-fpass-plugin={folder}/evil.so"], "-fpass-plugin={folder}/evil.so", "loads code"),
    ("B prefix", ["-B{folder}/bin"], "-B{folder}/bin", "run other programs"),
    ("unknown flag", ["--frobnicate"], "--frobnicate", "not on the allow-list"),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p[0] for p in PROBES])
def test_hostile_compile_flags_are_refused_naming_the_flag(hostile, probe):
    _, flags, named, reason = probe
    flags = [f.format(folder=hostile) for f in flags]
    named = named.format(folder=hostile)
    db = database(hostile, *flags)
    before = files_under(hostile)
    pattern = f"{re.escape(str(db))}: entry 0 \\(a.c\\): refused flag '{re.escape(named)}.*{reason}"
    with pytest.raises(ValueError, match=pattern) as refused:
        list(from_compile_commands(db))
    assert isinstance(refused.value, BPQError)
    with pytest.raises(ValueError, match=pattern):
        module_from_compile_commands(db)
    assert not (hostile.parent / "PLUGIN-RAN").exists() and not (hostile.parent / "AS-RAN").exists()
    assert files_under(hostile) == before         # no trace, record, stats or crash file


def test_hostile_compile_flags_are_refused_by_the_cli(hostile):
    """``bpq features``, ``bpq corpus build`` and ``bpq compile --program`` with ``--compile-commands``: one line
    naming the flag, exit 2, nothing run; a database of safe flags goes through."""
    db = database(hostile, "@plug.rsp")
    features = bpq_cli("features", "--compile-commands", db)
    assert features.returncode == 2, features.stderr
    assert "refused flag '@plug.rsp'" in features.stderr and "response file" in features.stderr
    assert "Traceback" not in features.stderr and len(features.stderr.strip().splitlines()) == 1
    db = database(hostile, f"--prefix={hostile}/bin/", "-x", "assembler", "-fno-integrated-as")
    build = bpq_cli("corpus", "build", "--compile-commands", db, "--out", hostile.parent / "store")
    assert build.returncode == 2 and f"refused flag '--prefix={hostile}/bin/'" in build.stderr, build.stderr
    assert not (hostile.parent / "PLUGIN-RAN").exists() and not (hostile.parent / "AS-RAN").exists()
    assert not (hostile.parent / "store").exists()
    program = bpq_cli("compile", "--compile-commands", db, "--program", "a", "-o", hostile.parent / "a.out")
    assert program.returncode == 2 and "refused flag '--prefix=" in program.stderr, program.stderr
    assert not (hostile.parent / "AS-RAN").exists() and not (hostile.parent / "a.out").exists()
    db = database(hostile, "-DSEED=3", "-fvisibility=hidden")
    accepted = bpq_cli("features", "--compile-commands", db, "--json")
    assert accepted.returncode == 0 and json.loads(accepted.stdout)["features"]["TotalInsts"] > 0, accepted.stderr


def test_allow_plugins_keeps_the_flags_a_trusted_build_file_gives(hostile):
    db = database(hostile, "-DN=2", f"-ftime-trace={hostile}/trace.json", "-O2", "-o", "a.o")
    (item,) = from_compile_commands(db, allow_plugins=True)
    assert item.flags == ("-DN=2", f"-ftime-trace={hostile}/trace.json")
    module_from_compile_commands(db, allow_plugins=True)
    assert (hostile / "trace.json").is_file()      # the user asked for it


def test_refusals_never_echo_a_referenced_file(hostile):
    """``@/etc/shadow`` made clang quote the file's first line in its error; the refusal names only the flag.
    ``-include`` reads only a header."""
    for flags, named in ((["@secret"], "@secret"), ([f"@{hostile}/secret"], f"@{hostile}/secret"),
                         (["-include", "secret"], "-include secret"), ([f"--config={hostile}/secret"], "--config")):
        db = database(hostile, *flags)
        with pytest.raises(ValueError, match=re.escape(named)) as refused:
            module_from_compile_commands(db)
        assert "TOPSECRET" not in str(refused.value)
        cli = bpq_cli("features", "--compile-commands", db)
        assert cli.returncode == 2 and named in cli.stderr and "TOPSECRET" not in cli.stderr + cli.stdout


def test_flags_are_paired_with_their_values_as_clang_pairs_them():
    """A flag's value is screened as clang reads it: ``-I -fplugin=x`` is a folder to search (clang takes the
    next argument as the value), ``-o -fplugin=x`` is dropped whole; other sources of a command that compiles
    several are dropped; ``-Wp,`` may only carry defines or a dependency file."""
    screened = recorded_flags(["cc", "-I", "-fplugin=x.so", "-o", "-fplugin=y.so", "-x", "c++", "-include",
                               "config.h", "b.c", "libz.a", "-Wp,-D_FORTIFY_SOURCE=2", "-Wp,-MD,.deps/a.d",
                               "-Wa,--noexecstack", "-c", "a.c"], "a.c")
    assert screened.refused == ()
    assert screened.flags == ("-I", "-fplugin=x.so", "-x", "c++", "-include", "config.h",
                              "-Wp,-D_FORTIFY_SOURCE=2")
    refused = recorded_flags(["cc", "-x", "assembler", "-include", "/etc/passwd", "-Wp,-MD,a.d,-load,e.so",
                              "-fbasic-block-sections=list=sections.txt", "-fsome-option=/etc/x", "-c", "a.c",
                              "notes.txt", "-isystem"], "a.c").refused
    assert [flag for flag, _ in refused] == ["-x assembler", "-include /etc/passwd", "-Wp,-MD,a.d,-load,e.so",
                                             "-fbasic-block-sections=list=sections.txt", "-fsome-option=/etc/x",
                                             "notes.txt", "-isystem"]
    assert [reason for _, reason in refused][-3:] == ["names a path", "is an input other than the entry's file",
                                                      "lacks its value"]


# Flags of clang-19 whose name says file, path, folder, plugin, ... and that the allow-list takes, each reviewed:
# debug-info strings and maps (never opened), diagnostics, code generation options whose name only contains such a
# word. A new clang flag with such a name fails the test below until it is reviewed and refused or listed here.
REVIEWED = {"-faapcs-bitfield-load", "-fbasic-block-address-map", "-fdebug-compilation-dir", "-fdebug-prefix-map=",
            "-fdebug-compilation-dir=", "-fdiagnostics-absolute-paths", "-fdwarf-directory-asm",
            "-ffile-compilation-dir=", "-ffile-prefix-map=", "-ffile-reproducible",
            "-fforce-check-cxx20-modules-input-files", "-fmacro-prefix-map=", "-forder-file-instrumentation",
            "-frecord-command-line", "-frecord-marker=", "-fstruct-path-tbaa", "-ftime-report", "-ftime-report=",
            "-fvalidate-ast-input-files-content", "-fwhole-file", "-mrecord-mcount", "-msave-restore",
            "-mspeculative-load-hardening"}
FILE_WORDS = {"file", "files", "path", "paths", "dir", "directory", "plugin", "list", "output", "trace", "record",
              "report", "dump", "save", "cache", "index", "resource", "stat", "stats", "log", "write", "load", "map"}


def test_every_clang_flag_naming_files_is_refused_or_reviewed():
    names = set()
    for prefix in ("-f", "-m"):
        listing = subprocess.run(["clang-19", f"--autocomplete={prefix}"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout
        names |= {line.split()[0] for line in listing.splitlines() if line.strip()}
    fileish = {n for n in names if not n.startswith(("-fno-", "-mno-", "-fno_"))
               and FILE_WORDS & set(re.split(r"[-=_+]", n[2:].rstrip("=")))}
    assert {"-ftime-trace=", "-fplugin=", "-fmodules-cache-path=", "-fprofile-list="} <= fileish   # the rule bites
    taken = {n for n in fileish if not recorded_flags(["cc", n + "x" if n.endswith("=") else n], "a.c").refused
             and recorded_flags(["cc", n + "x" if n.endswith("=") else n], "a.c").flags}
    assert taken <= REVIEWED, f"review these clang flags: {sorted(taken - REVIEWED)}"


CMAKE_C = ("/usr/bin/cc -DZLIB_DLL -D_LARGEFILE64_SOURCE=1 -Djson_c_EXPORTS -I{root}/build -I{root}/src "
           "-isystem {root}/third_party -O3 -DNDEBUG -fPIC -fvisibility=hidden -ffunction-sections -fdata-sections "
           "-Werror -Wall -Wcast-qual -Wno-error=deprecated-declarations -Wextra -Wwrite-strings "
           "-Wno-unused-parameter -Wstrict-prototypes -O2 -D JSON_C_DLL -D_REENTRANT -std=gnu99 -pthread "
           "-fno-strict-aliasing -fstack-protector-strong -fno-omit-frame-pointer -march=x86-64 -mtune=generic "
           "-Wp,-D_FORTIFY_SOURCE=2 -Wa,--noexecstack -ffile-prefix-map={root}=. -fdiagnostics-color=always "
           "-o CMakeFiles/lib.dir/src/{name}.o -c {root}/src/{name}")
MESON_C = ("cc -Ilib.a.p -I. -I.. -fdiagnostics-color=always -D_FILE_OFFSET_BITS=64 -Wall -Winvalid-pch "
           "-Wextra -Wpedantic -std=c99 -O3 -include config.h -MD -MQ lib.a.p/{name}.o -MF lib.a.p/{name}.o.d "
           "-o lib.a.p/{name}.o -c ../src/{name}")
AUTOTOOLS_C = ("gcc -DHAVE_CONFIG_H -DPACKAGE_STRING=\\\"xz\\ 5.6\\\" -I. -I.. -pedantic --std=c99 -g -O2 "
               "-MT {name}.lo -MD -MP -MF .deps/{name}.Tpo -c ../src/{name} -fPIC -DPIC -o .libs/{name}.o")
CMAKE_CXX = ("/usr/bin/c++ -DLEVELDB_PLATFORM_POSIX=1 -I{root}/build/include -I{root}/. -fno-exceptions -fno-rtti "
             "-O3 -DNDEBUG -Werror -Wthread-safety -std=c++11 -fPIC -fvisibility-inlines-hidden "
             "-Xclang -include-pch -Xclang {root}/build/cmake_pch.hxx.pch -Xclang -include -Xclang "
             "{root}/build/cmake_pch.hxx -o CMakeFiles/db.dir/{name}.o -c {root}/src/{name}")


def test_a_real_build_systems_database_is_taken_whole(tmp_path):
    """Flags as CMake (zlib, json-c, leveldb, a precompiled header), Meson and Autotools write them for C and C++
    projects, with the hardening flags distributions add: every entry is accepted, keeps its defines, folders and
    options, and compiles."""
    root = tmp_path / "proj"
    for sub in ("src", "build", "third_party"):
        (root / sub).mkdir(parents=True)
    (root / "build" / "config.h").write_text("#define HAVE_THING 1\n")
    (root / "build" / "cmake_pch.hxx").write_text("#include <vector>\n")      # CMake's precompiled header
    (root / "src" / "a.c").write_text('#include "config.h"\nint a(int x) { return x * HAVE_THING + ZLIB_DLL; }\n')
    (root / "src" / "b.c").write_text("int b(int x) { return x - HAVE_THING; }\n")
    (root / "src" / "c.c").write_text("#include <string.h>\nint c(const char *s) { return (int)strlen(s) + PIC; }\n")
    (root / "src" / "d.cc").write_text("int d(const std::vector<int>& v) { return (int)v.size(); }\n")
    entries = [{"directory": str(root / "build"), "file": str(root / "src" / "a.c"),
                "command": CMAKE_C.format(root=root, name="a.c").replace("-I{root}/src", "")},
               {"directory": str(root / "build"), "file": "../src/b.c", "command": MESON_C.format(name="b.c")},
               {"directory": str(root / "build"), "file": "../src/c.c", "command": AUTOTOOLS_C.format(name="c.c")},
               {"directory": str(root / "build"), "file": str(root / "src" / "d.cc"),
                "command": CMAKE_CXX.format(root=root, name="d.cc")}]
    db = root / "build" / "compile_commands.json"
    db.write_text(json.dumps(entries))
    for entry in entries:
        assert recorded_flags(shlex.split(entry["command"]), entry["file"], Path(entry["directory"])).refused == ()
    items = list(from_compile_commands(db, project="proj"))
    assert len(items) == 4
    assert items[0].flags[:4] == ("-DZLIB_DLL", "-D_LARGEFILE64_SOURCE=1", "-Djson_c_EXPORTS", f"-I{root}/build")
    assert "-fvisibility=hidden" in items[0].flags and "-Wa,--noexecstack" not in items[0].flags
    assert items[1].flags[-2:] == ("-include", "config.h") and "-MF" not in items[1].flags
    assert items[2].flags == ("-DHAVE_CONFIG_H", '-DPACKAGE_STRING="xz 5.6"', "-I.", "-I..", "-pedantic", "--std=c99",
                              "-fPIC", "-DPIC")
    assert items[3].flags[-2:] == ("-include", f"{root}/build/cmake_pch.hxx")    # the header, not the .pch
    module = module_from_compile_commands(db)
    assert set(defined(module)) >= {"a", "b", "c", "_Z1dRKSt6vectorIiSaIiEE"}


def defined(module):
    return re.findall(r"^define [^@]*@([\w.]+)\(", module.text(), re.M)


def test_one_file_listed_twice_is_one_unit(tmp_path, caplog):
    """CMake's static and shared builds list each file twice, with other flags: one unit each (the first entry's),
    so the program links instead of defining every symbol twice; identical entries collapse."""
    (tmp_path / "lib.c").write_text("int scale(int x) { return x * FACTOR; }\n")
    (tmp_path / "main.c").write_text("int scale(int);\nint main(void) { return scale(2); }\n")
    entries = []
    for target, flags in (("zlibstatic", ["-DFACTOR=3"]), ("zlib", ["-DFACTOR=3", "-DZLIB_DLL", "-fPIC"])):
        for name in ("lib.c", "main.c"):
            entries.append({"directory": str(tmp_path), "file": str(tmp_path / name),
                            "arguments": ["cc", *flags, "-o", f"{target}/{name}.o", "-c", str(tmp_path / name)]})
    entries.append(dict(entries[0]))
    db = tmp_path / "compile_commands.json"
    db.write_text(json.dumps(entries))
    with caplog.at_level(logging.WARNING, logger="behavioral_pq.corpus.inputs"):
        items = list(from_compile_commands(db))
    assert [Path(i.sources[0]).name for i in items] == ["lib.c", "main.c"]
    assert all(i.flags == ("-DFACTOR=3",) for i in items)
    assert "2 files have several entries with other flags" in caplog.text
    module = module_from_compile_commands(db)                  # linked: each symbol defined once
    assert sorted(defined(module)) == ["main", "scale"] and re.search(r"mul nsw i32 %\d+, 3", module.text())


def test_a_database_of_200000_entries_is_refused_at_once(tmp_path):
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    entry = {"directory": str(tmp_path), "file": "a.c", "arguments": ["cc", "-c", "a.c"]}
    db = tmp_path / "compile_commands.json"
    db.write_text(json.dumps([entry] * 200_000))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="200,000 entries, more than the 100,000") as refused:
        list(from_compile_commands(db))
    assert isinstance(refused.value, BPQError) and time.perf_counter() - start < 30
    db.write_text(json.dumps([entry] * 5_000))             # under the cap: one unit
    assert len(list(from_compile_commands(db))) == 1


def test_a_missing_directory_is_reported_as_such(tmp_path):
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    (tmp_path / "plain-file").write_text("")
    for directory, said in ((tmp_path / "gone", "does not exist"), (tmp_path / "plain-file", "is not a folder")):
        db = tmp_path / "compile_commands.json"
        db.write_text(json.dumps([{"directory": str(directory), "file": str(tmp_path / "a.c"),
                                   "arguments": ["cc", "-c", str(tmp_path / "a.c")]}]))
        with pytest.raises(ValueError, match=f"entry 0 .*: its directory {re.escape(str(directory))} {said}"):
            module_from_compile_commands(db)
        cli = bpq_cli("features", "--compile-commands", db)
        assert cli.returncode == 2 and said in cli.stderr and "not found" not in cli.stderr
    with pytest.raises(CompileError, match="no such folder"):
        compile_to_bitcode(tmp_path / "a.c", cwd=str(tmp_path / "gone"))


def test_a_database_nested_200000_deep_is_a_typed_error(tmp_path):
    db = tmp_path / "compile_commands.json"
    db.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested deeper than 100 levels") as refused:
        list(from_compile_commands(db))
    assert isinstance(refused.value, BPQError)
    cli = bpq_cli("features", "--compile-commands", db)
    assert cli.returncode == 2 and "nested deeper than 100" in cli.stderr and "Traceback" not in cli.stderr


def test_a_database_that_is_not_a_regular_file_is_refused_unread(tmp_path):
    fifo = tmp_path / "compile_commands.json"
    os.mkfifo(fifo)                     # reading it would wait for a writer forever
    with pytest.raises(ValueError, match="not a regular file"):
        list(from_compile_commands(fifo))
    with pytest.raises(ValueError, match="not a regular file"):
        list(from_compile_commands("/dev/zero"))


def test_entries_of_the_wrong_types_are_typed_errors(tmp_path):
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    db = tmp_path / "compile_commands.json"
    for entries, said in (([{"directory": str(tmp_path), "file": "a.c", "arguments": ["cc", 3]}], "list of strings"),
                          ([{"directory": str(tmp_path), "file": 7, "command": "cc -c a.c"}], "must be strings"),
                          ([{"directory": str(tmp_path), "file": "a.c", "command": "cc 'a.c"}], "cannot split")):
        db.write_text(json.dumps(entries))
        with pytest.raises(ValueError, match=said) as refused:
            list(from_compile_commands(db))
        assert isinstance(refused.value, BPQError)


# == end of compile databases =====================================================================================


# -- artifacts: bounded, typed reads -------------------------------------------------------------------------------
# Every file read from an artifact or a user is a regular file of bounded size and (JSON) bounded depth; weights are
# checked against the model config before anything is allocated; refusals never quote the refused file.

from behavioral_pq.artifacts import file_checksums, seal  # noqa: E402
from behavioral_pq.config import load_toml  # noqa: E402
from behavioral_pq.embedding.checkpoint import load_checkpoint  # noqa: E402
from behavioral_pq.embedding.probes import MAX_PROBE_LENGTH, MAX_PROBES, ProbeSet, load_probes  # noqa: E402
from behavioral_pq.embedding.quantizer import Quantizer  # noqa: E402
from behavioral_pq.errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    InvalidIRError,
    LibraryError,
    ProbeSetError,
    QuantizerError,
)
from behavioral_pq.tasks.estimators import BestPassClassifier  # noqa: E402
from behavioral_pq.tasks.guidance.library import load_library  # noqa: E402

ENCODER = CHECKPOINTS / "pqbert-small-m14-s0"
LIBRARY = CHECKPOINTS / "pqbert-small-m14-s0-library"
BEST_PASS = CHECKPOINTS / "pqbert-small-m14-s0-best-pass"
ARTIFACT_SECRET = "ARTIFACT_SECRET-4f1c9e hunter2 root:$6$salt$hash"
DEEP_JSON = "[" * 200_000 + "]" * 200_000


def artifact_copy(tmp_path: Path, source: Path = ENCODER) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def replace_with(path: Path, target) -> Path:
    """``path`` made a symlink to ``target`` (a device, a pseudo-file), as a hostile folder would ship it."""
    path.unlink()
    path.symlink_to(target)
    return path


def reseal_checkpoint(folder: Path, change=lambda config: None) -> None:
    """Apply ``change`` to config.json, then recompute its file checksums and digest: a checkpoint that passes every
    integrity check, as one made (or remade) by a hostile author would."""
    config = json.loads((folder / "config.json").read_text())
    change(config)
    config["files"] = file_checksums(folder, config["files"])
    (folder / "config.json").write_text(json.dumps(seal(config)))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_checkpoint_config_that_is_a_device_or_a_fifo_is_refused_at_once(tmp_path, target):
    folder = artifact_copy(tmp_path)
    if target == "fifo":
        (folder / "config.json").unlink()
        os.mkfifo(folder / "config.json")
    else:
        replace_with(folder / "config.json", target)
    kind = "a FIFO" if target == "fifo" else "a character device"   # refused by type, never opened for reading
    with pytest.raises(CheckpointError, match=f"config.json: unreadable checkpoint config .not a regular file: {kind}"):
        load_checkpoint(folder)


@pytest.mark.timeout(20)
def test_a_library_listing_that_is_dev_zero_is_refused_at_once(tmp_path):
    folder = artifact_copy(tmp_path, LIBRARY)
    replace_with(folder / "library.json", "/dev/zero")
    with pytest.raises(LibraryError, match="library.json: unreadable .* \\(not a regular file: a character device"):
        load_library(folder)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/pagemap", "fifo"])
def test_a_probe_set_that_is_not_a_plain_file_is_refused_at_once(tmp_path, target):
    if target == "fifo":
        target = tmp_path / "probes.json"
        os.mkfifo(target)
    with pytest.raises(ProbeSetError, match="unreadable probe set"):
        load_probes(target)


@pytest.mark.timeout(20)
def test_weights_linked_to_a_pseudo_file_outside_the_folder_are_refused(tmp_path):
    folder = artifact_copy(tmp_path)
    replace_with(folder / "model.safetensors", "/proc/self/pagemap")
    with pytest.raises(CheckpointError, match="'model.safetensors' leads outside the folder"):
        load_checkpoint(folder)


def test_checkpoint_files_are_confined_to_their_folder(tmp_path):
    """A probes.json linked to an identical file elsewhere passes its checksum, and is still refused: a hostile
    checkpoint must not make the library read files outside it."""
    folder = artifact_copy(tmp_path)
    outside = tmp_path / "elsewhere.json"
    shutil.copy(folder / "probes.json", outside)
    replace_with(folder / "probes.json", outside)
    with pytest.raises(CheckpointError, match="'probes.json' leads outside the folder"):
        load_checkpoint(folder)


@pytest.mark.timeout(20)
def test_a_toml_config_or_an_ir_file_read_from_proc_is_refused_at_once():
    with pytest.raises(ConfigError, match="unreadable configuration file"):
        load_toml("/proc/self/pagemap")
    with pytest.raises(InvalidIRError, match="unreadable IR file"):
        bpq.load_module("/proc/self/pagemap")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change, mismatch", [
    (lambda model: model.update(intermediate_size=1 << 40), r"linear1.weight: \(512, 224\) in the weights, "
                                                            r"\(1099511627776, 224\) by the config"),
    (lambda model: model.update(num_hidden_layers=10 ** 9), "1000000000 layers and 14 sub-spaces in the config, "
                                                            "70 tensors in the weights"),
    (lambda model: model.update(sub_embedding_size=1 << 20), r"cls_embedding: \(224,\) in the weights, "
                                                             r"\(14680064,\) by the config"),
])
def test_a_resealed_config_naming_a_huge_model_is_refused_before_it_is_built(tmp_path, change, mismatch):
    folder = artifact_copy(tmp_path)
    reseal_checkpoint(folder, lambda config: change(config["model"]))
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=f"model.safetensors: weights do not fit the model config .*{mismatch}"):
        load_checkpoint(folder)
    assert time.monotonic() - start < 20


def test_weights_that_are_not_finite_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = artifact_copy(tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    weights["final_norm.weight"][3] = float("nan")
    save_file(weights, str(folder / "model.safetensors"))
    reseal_checkpoint(folder)
    with pytest.raises(CheckpointError, match="tensor final_norm.weight holds NaN or infinite values"):
        load_checkpoint(folder)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_quantizer_centroids_that_are_not_finite_are_refused(tmp_path, value):
    quantizer = Quantizer.load(ENCODER / "quantizer.npz")
    quantizer.centroids_ = quantizer.centroids_.copy()
    quantizer.centroids_[2, 17, 0] = value
    quantizer.save(tmp_path / "quantizer.npz")          # with the checksum of its (poisoned) centroids
    with pytest.raises(QuantizerError, match="centroids hold NaN or infinite values"):
        Quantizer.load(tmp_path / "quantizer.npz")


def test_a_quantizer_whose_array_header_claims_a_huge_shape_is_refused_before_allocating(tmp_path):
    import io
    import zipfile

    header = np.frombuffer(json.dumps({"format": "bpq-quantizer", "version": 1}).encode(), np.uint8)
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    npy.write(b"\0" * 64)
    with zipfile.ZipFile(tmp_path / "quantizer.npz", "w") as archive:
        archive.writestr("centroids.npy", npy.getvalue())
        buffer = io.BytesIO()
        np.save(buffer, header)
        archive.writestr("header.npy", buffer.getvalue())
    with pytest.raises(QuantizerError, match=r"centroids.npy claims float32 \(1099511627776,\)"):
        Quantizer.load(tmp_path / "quantizer.npz")


def test_a_predictor_naming_an_unknown_pooling_is_refused(tmp_path):
    from behavioral_pq.tasks.predictors import PredictorError, load_predictor

    folder = artifact_copy(tmp_path, BEST_PASS)
    config = json.loads((folder / "predictor.json").read_text())
    assert config["pooling"] == "mean+changes"
    config["pooling"] = "max; rm -rf /"
    (folder / "predictor.json").write_text(json.dumps(seal(config)))     # genuine-looking, sealed again
    with pytest.raises(PredictorError, match="unknown pooling 'max; rm -rf /'"):
        load_predictor(folder)


def test_a_predictor_whose_pooling_its_encoder_cannot_give_is_refused_with_a_predictor_error():
    """mean+changes reads log-relative rows: under an encoder of absolute reactions the predictor is refused in
    its own error type, not a ValueError from the encoder."""
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.predictors import PredictorError, load_predictor

    absolute = load_encoder(pooling="mean")
    absolute.reaction = "absolute"
    with pytest.raises(PredictorError, match="absolute"):
        load_predictor(BEST_PASS, encoder=absolute)


def test_a_library_naming_an_unknown_pooling_is_refused_with_a_library_error(tmp_path):
    folder = artifact_copy(tmp_path, LIBRARY)
    config = json.loads((folder / "library.json").read_text())
    config["encoder"]["pooling"] = "max"
    (folder / "library.json").write_text(json.dumps(seal(config)))
    with pytest.raises(LibraryError, match="pooling max"):
        load_library(folder)


def test_an_estimator_config_naming_a_huge_net_is_refused_before_it_is_built(tmp_path):
    folder = artifact_copy(tmp_path, BEST_PASS)
    meta = json.loads((folder / "estimator.json").read_text())
    meta["settings"]["hidden"] = 1 << 40
    (folder / "estimator.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"net.0.weight: \(\d+, 424\) in the weights, \(1099511627776, 424\)"):
        BestPassClassifier.load(folder)


@pytest.mark.timeout(20)
def test_json_nested_200k_deep_is_a_typed_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(DEEP_JSON)
    with pytest.raises(ProbeSetError, match="JSON nested deeper than 100 levels"):
        load_probes(path)
    folder = artifact_copy(tmp_path)
    (folder / "config.json").write_text(DEEP_JSON)
    with pytest.raises(CheckpointError, match="JSON nested deeper than 100 levels"):
        load_checkpoint(folder)
    library = artifact_copy(tmp_path, LIBRARY)
    (library / "library.json").write_text(DEEP_JSON)
    with pytest.raises(LibraryError, match="JSON nested deeper than 100 levels"):
        load_library(library)
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 200_000)
    with pytest.raises(ConfigError, match="nested too deep"):
        load_toml(path)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("sequences, message", [
    ([["-sroa"]] * 10 ** 6, f"1000000 probes, more than the {MAX_PROBES} a probe set may hold"),
    ([["-sroa"]] * 3 + [["-sroa"] * 10 ** 5], f"probe 3 has 100000 passes, more than the {MAX_PROBE_LENGTH}"),
])
def test_an_absurd_probe_set_is_refused_fast(tmp_path, sequences, message):
    path = tmp_path / "probes.json"
    path.write_text(json.dumps({"format_version": 1, "name": "absurd", "llvm_major": 19, "sequences": sequences}))
    start = time.monotonic()
    with pytest.raises(ProbeSetError, match=message):
        load_probes(path)
    assert time.monotonic() - start < 15       # parsing 11 MB of JSON: about 3 s on a busy 2-core machine
    with pytest.raises(ProbeSetError, match=message.split(",")[1].strip()):
        ProbeSet("absurd", tuple(tuple(s) for s in sequences))


def test_the_shipped_probe_sets_are_within_the_caps():
    from behavioral_pq.embedding.probes import shipped_probe_sets

    for name in shipped_probe_sets():
        probes = load_probes(name)
        assert probes.num_probes <= 100 <= MAX_PROBES and probes.length <= 50 <= MAX_PROBE_LENGTH


@pytest.mark.timeout(60)
def test_a_benchmark_or_module_that_is_not_ir_is_refused_without_quoting_it(tmp_path):
    from behavioral_pq.env.llvm import make

    secret = tmp_path / "shadow"
    secret.write_text(ARTIFACT_SECRET + "\nsecond line\n")
    env = make("llvm-v0", benchmark=str(secret))
    with pytest.raises(InvalidIRError) as refused:
        env.reset()
    message = str(refused.value)
    assert "shadow:1:1: error: expected top-level entity" in message and "ARTIFACT_SECRET" not in message
    assert "\n" not in message
    for source in (secret, secret.read_bytes()):
        with pytest.raises(InvalidIRError) as refused:
            bpq.load_module(source)
        assert "expected top-level entity" in str(refused.value) and "ARTIFACT_SECRET" not in str(refused.value)


def test_artifact_refusals_never_quote_the_refused_file(tmp_path):
    folder = artifact_copy(tmp_path)
    (folder / "config.json").write_text(ARTIFACT_SECRET + "\n")
    path = tmp_path / "probes.json"
    path.write_bytes(ARTIFACT_SECRET.encode() + b"\xff\n")
    toml = tmp_path / "settings.toml"
    toml.write_text(ARTIFACT_SECRET + "\n")
    for load, source, error in ((load_checkpoint, folder, CheckpointError), (load_probes, path, ProbeSetError),
                                (load_toml, toml, ConfigError)):
        with pytest.raises(error) as refused:
            load(source)
        assert str(source) in str(refused.value) and "ARTIFACT_SECRET" not in str(refused.value)
