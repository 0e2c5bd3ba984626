"""Outputs a user names: checked before any work, never written through a symbolic link unless
``--overwrite``, never into a device or FIFO, written all at once (a full disk keeps the old file), and the name
printed is the file written."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.artifacts import atomic_path
from behavioral_pq.errors import OutputPathError

SOURCE = EXAMPLES / "sum_array.c"

#: Each verb that writes a file, with its arguments before ``-o``.
WRITERS = {
    "optimize": ("optimize", SOURCE, "--passes", "Oz", "--target", "measure"),
    "spectrum": ("spectrum", SOURCE),
    "embed": ("embed", SOURCE, "-q"),
    "lower": ("lower", SOURCE),
    "compile": ("compile", SOURCE, "--no-verify"),
    "probes subset": ("probes", "subset", "default", "--first", "3"),
}


def bpq_cli(*args, cwd=None, timeout=300, limit_bytes=None):
    """Run ``bpq``; with ``limit_bytes`` as a full disk would: no file it writes may grow past that size (EFBIG
    instead of SIGXFSZ, as a write to a full disk fails with ENOSPC)."""
    prefix = []
    if limit_bytes is not None:
        prefix = ["-c", textwrap.dedent(f"""\
            import resource, signal, sys
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, {limit_bytes}))
            from behavioral_pq.cli.main import main
            sys.exit(main(sys.argv[1:]))""")]
    else:
        prefix = ["-m", "behavioral_pq"]
    return subprocess.run([sys.executable, *prefix, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def error_lines(done) -> list:
    return [line for line in done.stderr.splitlines() if line.startswith("bpq: ")]


@pytest.fixture()
def outside(tmp_path_factory):
    """A file in another folder than the test's own: what a planted link points at."""
    victim = tmp_path_factory.mktemp("outside") / "victim.txt"
    victim.write_text("precious\n")
    return victim


# -- symbolic links ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["optimize", "spectrum", "embed", "lower", "probes subset"])
def test_an_output_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path, outside, verb):
    link = tmp_path / "out"
    link.symlink_to(outside)
    done = bpq_cli(*WRITERS[verb], "-o", link)
    assert done.returncode == 2, done.stderr
    assert error_lines(done) == [f"bpq: error: {link}: is a symbolic link (to {outside}); refusing to write through "
                                 "it (remove it, or pass --overwrite / overwrite=True to write its target)"]
    assert outside.read_text() == "precious\n"
    assert link.is_symlink() and os.readlink(link) == str(outside)


@pytest.mark.parametrize("verb", ["optimize", "spectrum"])
def test_a_dangling_symlink_creates_no_file_at_its_target(tmp_path, tmp_path_factory, verb):
    nowhere = tmp_path_factory.mktemp("elsewhere") / "planted.npy"
    link = tmp_path / "out.npy"
    link.symlink_to(nowhere)
    done = bpq_cli(*WRITERS[verb], "-o", link)
    assert done.returncode == 2 and f"{link}: is a symbolic link" in done.stderr
    assert not nowhere.exists() and not os.listdir(nowhere.parent)


def test_overwrite_writes_the_target_of_a_symlink_and_a_regular_file_is_replaced_without_it(tmp_path, outside):
    oz = bpq.optimize(bpq.load_module(SOURCE), "Oz").text()
    link = tmp_path / "out.ll"
    link.symlink_to(outside)
    done = bpq_cli(*WRITERS["optimize"], "-o", link, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"wrote {link}"
    assert link.is_symlink() and os.readlink(link) == str(outside)
    assert bpq.load_module(outside).text() == oz
    assert sorted(os.listdir(outside.parent)) == ["victim.txt"]   # written beside the target, no temporary left
    plain = tmp_path / "plain.ll"
    plain.write_text("old\n")
    done = bpq_cli(*WRITERS["optimize"], "-o", plain)              # users rerun commands: no --overwrite needed
    assert done.returncode == 0, done.stderr
    assert bpq.load_module(plain).text() == oz


def test_module_save_refuses_a_symlink_unless_overwrite(tmp_path, outside, examples):
    module = examples["sum_array"]
    link = tmp_path / "m.ll"
    link.symlink_to(outside)
    with pytest.raises(OutputPathError, match="is a symbolic link"):
        module.save(link)
    assert outside.read_text() == "precious\n"
    assert module.save(link, overwrite=True) == link
    assert link.is_symlink() and bpq.load_module(outside).text() == module.text()


# -- places that take no file --------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb, path, why", [
    ("compile", "/sys/okbin", "/sys takes no new files (Permission denied)"),
    ("optimize", "/sys/okbin", "/sys takes no new files (Permission denied)"),
    ("spectrum", "/proc/x.npy", "/proc takes no new files (No such file or directory)"),
    ("embed", "/proc/x.npy", "/proc takes no new files (No such file or directory)"),
])
def test_a_folder_that_takes_no_files_is_refused_before_any_work(tmp_path, verb, path, why):
    # os.access says yes to root for /sys and /proc; the refusal must still come before the source is compiled:
    # this source does not compile, so an error about anything but the output means the work started first
    broken = tmp_path / "broken.c"
    broken.write_text("int main( {\n")
    args = [a if a != SOURCE else broken for a in WRITERS[verb]]
    done = bpq_cli(*args, "-o", path)
    assert done.returncode == 2
    assert error_lines(done) == [f"bpq: error: {path}: cannot write there: {why}"]


def test_an_output_under_a_file_or_in_place_of_a_folder_is_refused_with_the_reason(tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    for out, why in ((tmp_path / "a-file" / "x.ll", f"cannot write there: {tmp_path / 'a-file'} is not a folder"),
                     (tmp_path / "a-folder", "is a folder (give a file name)")):
        done = bpq_cli(*WRITERS["optimize"], "-o", out)
        assert done.returncode == 2
        assert error_lines(done) == [f"bpq: error: {out}: {why}"]
    assert (tmp_path / "a-file").read_text() == "x" and not os.listdir(tmp_path / "a-folder")


@pytest.mark.parametrize("args, out, why", [
    (("pretrain", "missing-store"), "/sys/run", "cannot write there: /sys takes no new files (Permission denied)"),
    (("corpus", "generate", "--csmith", "1"), "/proc/csmith",
     "cannot write there: /proc takes no new files (No such file or directory)"),
    (("train", "oz", "--corpus", "missing-store"), "a-file", "is not a folder (give a folder for the outputs)"),
    (("leaderboard", "--corpus", "missing-store"), "dangling/sub", "cannot write there: dangling is a symbolic "
                                                                    "link to nothing"),
])
def test_an_output_folder_is_checked_before_any_work(tmp_path, args, out, why):
    # the store does not exist: an error about it, not about --out, means the work started first
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    done = bpq_cli(*args, "--out", out, cwd=tmp_path)
    assert done.returncode == 2
    assert error_lines(done) == [f"bpq: error: {out}: {why}"]
    assert sorted(os.listdir(tmp_path)) == ["a-file", "dangling"]


def test_a_fifo_or_device_is_refused_not_opened(tmp_path):
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    done = bpq_cli(*WRITERS["spectrum"], "-o", fifo, timeout=60)   # opening a FIFO to write would block
    assert done.returncode == 2
    assert error_lines(done) == [f"bpq: error: {fifo}: is not a regular file (a device, FIFO or socket); refusing "
                                 "to replace it"]
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    with pytest.raises(OutputPathError, match="/dev/null: is not a regular file"):
        with atomic_path("/dev/null") as tmp:   # root could replace the device itself
            tmp.write_text("x")
    assert not os.path.isfile("/dev/null")


# -- a full disk -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb, name, why", [
    ("optimize", "out.ll", "cannot write it (File too large); nothing was changed"),
    ("spectrum", "out.npy", "cannot write it (File too large); nothing was changed"),
    ("compile", "prog", "not written: clang-19 exited with 1: "),   # the linker's own error follows
])
def test_a_full_disk_keeps_the_old_output_and_leaves_no_temporary(tmp_path, verb, name, why):
    out = tmp_path / name
    out.write_text("old output\n")
    done = bpq_cli(*WRITERS[verb], "-o", out, limit_bytes=3000)   # each result is larger than 3000 bytes
    assert done.returncode == 1, done.stderr
    assert out.read_text() == "old output\n"
    assert sorted(os.listdir(tmp_path)) == [name]
    lines = error_lines(done)
    assert len(lines) == 1 and lines[0].startswith(f"bpq: error: {out}: {why}"), lines


def test_module_save_on_a_full_disk_keeps_the_old_file(tmp_path):
    out = tmp_path / "m.ll"
    out.write_text("old module\n")
    script = textwrap.dedent(f"""\
        import resource, signal
        import behavioral_pq as bpq
        module = bpq.load_module({str(SOURCE)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            module.save({str(out)!r})
        except OSError as exc:
            print(type(exc).__name__, exc.errno, exc)""")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "old module\n"
    assert sorted(os.listdir(tmp_path)) == ["m.ll"]
    assert done.stdout.strip() == f"OSError 27 {out}: cannot write it (File too large); nothing was changed"


# -- the printed name ------------------------------------------------------------------------------------------

def test_spectrum_and_embed_write_exactly_the_name_they_print(tmp_path):
    spectrum = bpq_cli(*WRITERS["spectrum"], "-o", "spec", cwd=tmp_path)
    assert spectrum.returncode == 0, spectrum.stderr
    assert spectrum.stdout.splitlines()[-1] == "wrote spec"
    embedded = bpq_cli("embed", SOURCE, "-o", "emb", cwd=tmp_path)
    assert embedded.returncode == 0, embedded.stderr
    assert embedded.stderr.strip().splitlines()[-1].startswith("1 of 1 embedded -> emb (float32 (1, ")
    assert sorted(os.listdir(tmp_path)) == ["emb", "spec"]
    assert np.load(tmp_path / "spec").shape[1] == 56
    assert np.load(tmp_path / "emb").shape[0] == 1
