"""The benchmark folders stay navigable: every ``bench/...`` path the documentation and the code name exists, every
script is in its topic's README, and every script still starts (``--help``) from its folder."""

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
TOPICS = sorted(p.name for p in BENCH.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
SCRIPTS = sorted(p for topic in TOPICS for p in (BENCH / topic).glob("*.py"))

#: a bench path as text names it; its end is trimmed of sentence punctuation
PATH = re.compile(r"(?<![\w/.-])bench/[\w./+\-*{},$<>]*")
SKIPPED_FOLDERS = {".git", ".venv", "build", "node_modules", "bpq-demo", ".pytest_cache", "site"}


def named_paths(text: str):
    """The bench paths ``text`` names, without placeholders (``$S``, ``<topic>``, ``SPLIT``) or generated folders."""
    for token in PATH.findall(text):
        token = token.rstrip(".,:;)`'\"")
        if re.search(r"[$<]|[A-Z]{2,}", token) or token.startswith("bench/.cache") or token == "bench/":
            continue
        yield token


def alternatives(path: str):
    """``a.{json,md}`` -> ``a.json``, ``a.md``."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [p for alt in match.group(1).split(",")
            for p in alternatives(path[:match.start()] + alt + path[match.end():])]


def documents():
    """The repository's Markdown, Python and TOML files and its Makefile (build outputs and this file left out: it
    names missing paths on purpose)."""
    for folder, folders, files in os.walk(REPO):
        folders[:] = sorted(f for f in folders if f not in SKIPPED_FOLDERS)
        for name in sorted(files):
            path = Path(folder) / name
            if (path.suffix in (".md", ".py", ".toml") or name == "Makefile") and path != Path(__file__).resolve():
                yield path


def test_the_path_check_sees_a_missing_path():
    text = "`bench/spectra/results/spectra.{json,md}`, bench/results/spectra.json, bench/<topic>/x.py, $S"
    paths = [p for token in named_paths(text) for p in alternatives(token)]
    assert paths == ["bench/spectra/results/spectra.json", "bench/spectra/results/spectra.md",
                     "bench/results/spectra.json"]
    assert not glob.glob(str(REPO / paths[-1]))


def test_every_bench_path_named_in_the_repository_exists():
    missing = []
    for file in documents():
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            for token in named_paths(line):
                missing += [f"{file.relative_to(REPO)}:{number}: {p}" for p in alternatives(token)
                            if not glob.glob(str(REPO / p))]
    assert not missing, "\n".join(missing)


def test_every_script_is_in_its_topic_readme_and_every_topic_in_the_index():
    index = (BENCH / "README.md").read_text()
    assert sorted(p.name for p in BENCH.glob("*.py")) == ["common.py"], "scripts belong in a topic folder"
    for topic in TOPICS:
        assert f"({topic}/README.md)" in index, topic
        readme = (BENCH / topic / "README.md").read_text()
        for script in (BENCH / topic).glob("*.py"):
            assert f"`{script.name}`" in readme, f"{script.name} is not in bench/{topic}/README.md"


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in SCRIPTS if not s.name.startswith("_")],
                         ids=lambda s: f"{s.parent.name}/{s.name}")
def test_every_script_starts(script, tmp_path):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:")
