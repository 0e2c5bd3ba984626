"""The examples of README.md and the documentation site (docs/**/*.md) run, so the documentation cannot rot.

A fenced code block is an *example* when the line right before its opening fence is exactly ``<!-- example -->``
(``<!-- example: slow -->`` for one that takes more than about 20 s); other blocks are illustration. A
``python`` example runs as a script with this interpreter, an ``sh`` example with ``bash -euo pipefail`` and the
interpreter's bin/ first on PATH (so ``bpq`` is the package's). Each page's examples run in order in one fresh
folder holding a symbolic link to every top-level entry of the repository (paths resolve as from a checkout's
root; what an example writes stays in the folder). An example fails when it exits non-zero; Python examples state
their results with ``assert``.

One test per page with examples; a page with slow examples also gets a ``[slow]`` test, marked slow, that runs all
its examples in order, while the plain test skips the slow ones (so a fast example must not need what a slow one
writes).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKERS = {"<!-- example -->": False, "<!-- example: slow -->": True}
LANGUAGES = ("python", "sh")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)")
TIMEOUT = 240            # seconds per example
SLOW_TIMEOUT = 1800      # seconds per example of a [slow] test
TAIL = 4000              # characters of output shown for a failed example


@dataclass(frozen=True)
class Example:
    page: str       # path from the repository root
    line: int       # 1-based line of the opening fence
    language: str
    code: str
    slow: bool


class ExampleError(AssertionError):
    """An example that failed, or a page whose examples cannot be read."""


def find_examples(text: str, page: str) -> List[Example]:
    """The examples of one Markdown page, in page order."""
    lines = text.splitlines()
    examples: List[Example] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"].expandtabs())
        end = i + 1
        while end < len(lines) and not re.fullmatch(rf"[ \t]*{fence[0]}{{{len(fence)},}}[ \t]*", lines[end]):
            end += 1
        slow = MARKERS.get(lines[i - 1].strip()) if i > 0 else None
        if slow is not None:
            language = opening["info"].lower()
            if language not in LANGUAGES:
                raise ExampleError(f"{page}:{i + 1}: an example must be one of {', '.join(LANGUAGES)}, "
                                   f"not {language or 'a block with no language'}")
            if end >= len(lines):
                raise ExampleError(f"{page}:{i + 1}: the example's code block is not closed")
            body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1:end])
            examples.append(Example(page, i + 1, language, textwrap.dedent(body) + "\n", slow))
        i = end + 1
    return examples


def prepare_folder(folder: Path, root: Path = ROOT) -> Path:
    """``folder`` with a symbolic link to every top-level entry of ``root`` but .git."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in sorted(root.iterdir()):
        if entry.name != ".git":
            (folder / entry.name).symlink_to(entry)
    return folder


def run_examples(examples: Sequence[Example], folder: Path, scripts: Path, timeout: float = TIMEOUT) -> None:
    """Run ``examples`` in order with ``folder`` as working directory (scripts are written to ``scripts``);
    raise ExampleError naming the page, the example's line and its output's tail on the first failure."""
    scripts.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    for example in examples:
        script = scripts / f"line{example.line}.{'py' if example.language == 'python' else 'sh'}"
        script.write_text(example.code)
        command = [sys.executable, str(script)] if example.language == "python" else \
            ["bash", "-euo", "pipefail", str(script)]
        where = f"{example.page}:{example.line}"
        # a session of its own, so that a timeout ends what the example started too
        with subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True) as process:
            try:
                output, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
                raise ExampleError(f"{where}: {example.language} example timed out after {timeout:g} s\n"
                                   f"{_tail(output)}") from None
        if process.returncode != 0:
            raise ExampleError(f"{where}: {example.language} example failed (exit {process.returncode})\n"
                               f"{_tail(output)}")


def _tail(output: Optional[bytes]) -> str:
    text = (output or b"").decode("utf-8", "replace")
    return ("..." + text[-TAIL:]) if len(text) > TAIL else text


def documentation_pages(root: Path = ROOT) -> List[Path]:
    return [root / "README.md"] * (root / "README.md").is_file() + sorted((root / "docs").rglob("*.md"))


def page_cases(root: Path = ROOT):
    """One pytest parameter per page with examples, ``page[slow]`` (marked slow) for a page with slow ones."""
    cases = []
    for path in documentation_pages(root):
        page = path.relative_to(root).as_posix()
        examples = find_examples(path.read_text(encoding="utf-8"), page)
        fast = [e for e in examples if not e.slow]
        if fast:
            cases.append(pytest.param(fast, TIMEOUT, id=page))
        if len(fast) < len(examples):
            cases.append(pytest.param(examples, SLOW_TIMEOUT, id=f"{page}[slow]",
                                      marks=[pytest.mark.slow, pytest.mark.timeout(SLOW_TIMEOUT * len(examples))]))
    return cases


@pytest.mark.parametrize(("examples", "timeout"), page_cases())
def test_page_examples(examples, timeout, tmp_path):
    run_examples(examples, prepare_folder(tmp_path / "work"), tmp_path / "scripts", timeout)


def test_readme_has_examples():
    assert any(not e.slow for e in find_examples((ROOT / "README.md").read_text(), "README.md")), \
        "README.md has no example (a fenced block right after <!-- example -->)"


# -- the collector itself ------------------------------------------------------------------------------------------

PAGE = """\
# A page

<!-- example -->
```python
print("first")
```

Illustration only, never run:

```python
raise SystemExit(1)
```

<!-- example -->

```sh
echo "a blank line after the marker: not an example"; exit 1
```

<!-- example: slow -->
```sh
echo slow
```

- in a list:

  <!-- example -->
  ~~~sh
  echo indented
  ~~~
"""


def test_markers_select_the_examples():
    examples = find_examples(PAGE, "page.md")
    assert [(e.line, e.language, e.slow) for e in examples] == [(4, "python", False), (21, "sh", True),
                                                                 (28, "sh", False)]
    assert examples[0].code == 'print("first")\n'
    assert examples[2].code == "echo indented\n"
    assert all(e.page == "page.md" for e in examples)


def test_a_marked_block_must_be_python_or_sh():
    with pytest.raises(ExampleError, match=r"page.md:2: an example must be one of python, sh, not console"):
        find_examples("<!-- example -->\n```console\n$ ls\n```\n", "page.md")
    with pytest.raises(ExampleError, match="not closed"):
        find_examples("<!-- example -->\n```sh\nls\n", "page.md")


def test_a_fence_inside_a_block_is_code():
    text = "````markdown\n<!-- example -->\n```sh\nexit 1\n```\n````\n"
    assert find_examples(text, "page.md") == []


def test_examples_run_in_order_in_one_folder_that_sees_the_repository(tmp_path):
    repository = tmp_path / "repository"
    (repository / "data").mkdir(parents=True)
    (repository / "data" / "input.txt").write_text("41\n")
    page = """\
<!-- example -->
```sh
n=$(cat data/input.txt)
echo $((n + 1)) > answer.txt
```

<!-- example -->
```python
import shutil, sys
from pathlib import Path
assert Path("answer.txt").read_text() == "42\\n"
assert shutil.which("python").startswith(str(Path(sys.executable).parent))
```
"""
    folder = prepare_folder(tmp_path / "work", repository)
    assert (folder / "data").is_symlink()
    run_examples(find_examples(page, "page.md"), folder, tmp_path / "scripts")
    assert (folder / "answer.txt").read_text() == "42\n"
    assert not (repository / "answer.txt").exists()


def test_a_failing_example_names_page_line_and_output(tmp_path):
    page = "text\n\n<!-- example -->\n```sh\necho ok\n```\n\n<!-- example -->\n```python\nprint('computed', 6 * 7)\n" \
           "assert 6 * 7 == 43, 'wrong answer'\n```\n\n<!-- example -->\n```sh\ntouch never-run\n```\n"
    with pytest.raises(ExampleError) as failed:
        run_examples(find_examples(page, "docs/page.md"), tmp_path, tmp_path / "scripts")
    message = str(failed.value)
    assert message.startswith("docs/page.md:9: python example failed (exit 1)")
    assert "computed 42" in message and "AssertionError: wrong answer" in message
    assert not (tmp_path / "never-run").exists()


def test_sh_examples_stop_at_the_first_failing_command(tmp_path):
    page = "<!-- example -->\n```sh\nfalse | cat\necho after > after.txt\n```\n"
    with pytest.raises(ExampleError, match=r"page.md:2: sh example failed \(exit 1\)"):
        run_examples(find_examples(page, "page.md"), tmp_path, tmp_path / "scripts")
    assert not (tmp_path / "after.txt").exists()


def test_an_example_that_hangs_times_out(tmp_path):
    page = "<!-- example -->\n```sh\necho started; sleep 30\n```\n"
    with pytest.raises(ExampleError, match=r"(?s)page.md:2: sh example timed out after 1 s\nstarted"):
        run_examples(find_examples(page, "page.md"), tmp_path, tmp_path / "scripts", timeout=1)


def test_a_page_with_slow_examples_gets_a_slow_test(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "fast.md").write_text("<!-- example -->\n```sh\ntrue\n```\n")
    (tmp_path / "docs" / "mixed.md").write_text(PAGE)
    (tmp_path / "docs" / "none.md").write_text("```sh\ntrue\n```\n")
    cases = {case.id: case for case in page_cases(tmp_path)}
    assert list(cases) == ["docs/fast.md", "docs/mixed.md", "docs/mixed.md[slow]"]
    assert [e.line for e in cases["docs/mixed.md"].values[0]] == [4, 28]
    assert [e.line for e in cases["docs/mixed.md[slow]"].values[0]] == [4, 21, 28]
    assert not any(m.name == "slow" for m in cases["docs/mixed.md"].marks)
    assert any(m.name == "slow" for m in cases["docs/mixed.md[slow]"].marks)
