"""README examples run, so the documentation cannot rot."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_python_example_runs(monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no Python example"
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})


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
