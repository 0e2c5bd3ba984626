"""The README's promises: its first commands, the package docstring's example, `make test`'s setup rule. The
README's examples run in tests/test_doc_examples.py, with those of the documentation site."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("```sh", 1)[1].split("```", 1)[0]
    assert "make demo" in head and "make test" in head
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_package_docstring_example(monkeypatch):
    import doctest

    import behavioral_pq

    monkeypatch.chdir(ROOT)
    test = doctest.DocTestParser().get_doctest(behavioral_pq.__doc__, {}, "behavioral_pq", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0 and runner.tries >= 3


def test_make_test_sets_up_only_when_a_build_input_changed(tmp_path):
    """`make test` reinstalled the package on every run (~44 s); setup now reruns only when
    the native sources or the build and setup files change. Checked on a copy of the Makefile whose setup
    script only counts its runs."""
    import shutil
    import subprocess
    import time

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for name in ("CMakeLists.txt", "pyproject.toml", "src/native/engine.cpp"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "setup.sh").write_text("mkdir -p .venv && echo ran >> setup-runs\n")
    (tmp_path / "behavioral_pq" / "env").mkdir(parents=True)
    (tmp_path / "behavioral_pq" / "env" / "gym.py").write_text("")

    def setups():
        subprocess.run(["make", "setup"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
        return (tmp_path / "setup-runs").read_text().count("ran")

    assert setups() == 1
    assert setups() == 1           # nothing changed: no reinstall
    time.sleep(1.1)                # make compares modification times
    (tmp_path / "src/native/engine.cpp").write_text("// changed")
    assert setups() == 2
    assert setups() == 2
    time.sleep(1.1)
    (tmp_path / "behavioral_pq" / "env" / "gym.py").write_text("x = 1")    # a Python edit: no reinstall
    assert setups() == 2
    (tmp_path / "behavioral_pq" / "env" / "gym.py").rename(tmp_path / "behavioral_pq" / "env" / "gym2.py")
    assert setups() == 3           # a module moved: the editable install's map of modules must be made again
    assert setups() == 3
