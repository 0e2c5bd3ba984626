"""The documentation site's hooks (scripts/mkdocs_hooks.py): repository links, includes, the generated CLI
reference and the API coverage check, on small sites built in a temporary folder."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parent.parent
HOOKS = ROOT / "scripts" / "mkdocs_hooks.py"


def load_hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks_under_test", HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_site(folder: Path, pages: dict, files: dict = None):
    """Build a site of ``pages`` (docs/NAME -> Markdown) in a repository ``folder`` holding ``files``; returns the
    completed ``mkdocs build --strict``."""
    for name, text in {**(files or {}), **{f"docs/{n}": t for n, t in pages.items()}}.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(textwrap.dedent(text))
    (folder / "mkdocs.yml").write_text(textwrap.dedent(f"""\
        site_name: test
        theme: mkdocs
        hooks: [{HOOKS}]
        nav: [{", ".join(pages)}]
        markdown_extensions:
          - pymdownx.snippets:
              base_path: [{folder}]
              check_paths: true
        validation:
          links: {{not_found: warn, anchors: warn, unrecognized_links: warn, absolute_links: warn}}
        """))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=folder, capture_output=True,
                          text=True, timeout=120, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def test_repository_links_includes_and_cli_reference(tmp_path):
    done = build_site(tmp_path, {
        "index.md": """\
            # Home

            See [the recipe](../recipes/README.md), [`recipes/README.md`](../recipes/README.md),
            [the recipes](../recipes), [the notes](../NOTES.md#second-part) and [the CLI](cli.md).
            Code is never a link: `[x](../missing.md)`.
            """,
        "notes.md": '--8<-- "NOTES.md"\n',
        "cli.md": "# CLI\n\n<!-- argparse: behavioral_pq.cli.main:build_parser -->\n",
    }, {
        "recipes/README.md": "# Recipes\n",
        "recipes/plot.png": b"\x89PNG\r\n\x1a\n",
        "NOTES.md": """\
            # Notes

            ![a plot](recipes/plot.png) and [the recipes](recipes/README.md).

            ```sh
            cat [not](a-link.md)
            ```

            ## Second part
            """,
    })
    assert done.returncode == 0, done.stderr
    index = (tmp_path / "site/index.html").read_text()
    assert "<span>the recipe (<code>recipes/README.md</code>)</span>" in index
    assert "<span><code>recipes/README.md</code></span>" in index
    assert "<span>the recipes (<code>recipes/</code>)</span>" in index
    assert 'href="notes/#second-part"' in index            # an included root file: its page
    notes = (tmp_path / "site/notes/index.html").read_text()
    assert 'src="../assets/repository/recipes/plot.png"' in notes
    assert (tmp_path / "site/assets/repository/recipes/plot.png").read_bytes() == b"\x89PNG\r\n\x1a\n"
    assert "<span>the recipes (<code>recipes/README.md</code>)</span>" in notes
    assert "cat [not](a-link.md)" in notes                 # code untouched by the rebasing
    cli = (tmp_path / "site/cli/index.html").read_text()
    from behavioral_pq.cli.main import build_parser

    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for verb in verbs:
        assert f'id="bpq-{verb}"' in cli
    assert 'id="bpq-corpus-build"' in cli and "<code>--out STORE</code>" in cli


@pytest.mark.parametrize(("page", "message"), [
    ("[gone](../nowhere/file.md)", "index.md: link '../nowhere/file.md' points to nowhere/file.md, which does not "
                                   "exist in the repository"),
    ("[up](../../outside.md)", "index.md: link '../../outside.md' points outside the repository"),
    ('--8<-- "MISSING.md"', "index.md: include 'MISSING.md': MISSING.md does not exist in the repository"),
    ("<!-- public-api: behavioral_pq -->\n\n::: behavioral_pq.embed",
     "index.md: behavioral_pq.Engine is in behavioral_pq.__all__ but the page has no '::: behavioral_pq.Engine'"),
])
def test_a_broken_link_include_or_api_page_fails_the_build(tmp_path, page, message):
    done = build_site(tmp_path / "repository", {"index.md": f"# Home\n\n{page}\n"})
    assert done.returncode != 0
    assert message in done.stderr


def test_rebasing_moves_relative_targets_only():
    hooks = load_hooks()
    text = ('[a](b/c.md) ![i](img.png "title") [web](https://x.org/a.md) [self](#top) `[code](x.md)`\n'
            "[ref]: notes/n.md\n\n```\n[fenced](f.md)\n```\n")
    assert hooks.rebase_links(text, "", "docs/how-to") == (
        '[a](../../b/c.md) ![i](../../img.png "title") [web](https://x.org/a.md) [self](#top) `[code](x.md)`\n'
        "[ref]: ../../notes/n.md\n\n```\n[fenced](f.md)\n```\n")


def test_cli_reference_of_a_parser():
    hooks = load_hooks()
    parser = argparse.ArgumentParser(prog="tool", description="Does things.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run a thing", epilog="examples:\n  tool run --n 3 x")
    run.add_argument("file", metavar="FILE", help="input | output")
    run.add_argument("--n", type=int, default=2, help="count (default %(default)s)")
    run.add_argument("--fast", action="store_true", help="go *fast*")
    text = hooks.cli_reference(parser)
    assert "## tool\n\nDoes things.\n" in text
    assert "| [`tool run`](#tool-run) | run a thing |" in text
    assert "## tool run\n\nRun a thing\n" in text
    assert "| `FILE` |  | input \\| output |" in text
    assert "| `--n N` | `2` | count (default 2) |" in text
    assert "| `--fast` |  | go \\*fast\\* |" in text
    assert "```text\nexamples:\n  tool run --n 3 x\n```" in text


def test_rest_literal_blocks_become_fenced_code():
    hooks = load_hooks()
    assert hooks.literal_blocks("Use it::\n\n    >>> f(1)\n    2\n\nThen.") == \
        "Use it:\n\n```pycon\n>>> f(1)\n2\n```\n\nThen."
    assert hooks.literal_blocks("Layout ::\n\n    a/\n      b") == "Layout\n\n```text\na/\n  b\n```"
    assert hooks.literal_blocks("Not a block::\nnext") == "Not a block::\nnext"


def test_include_selections(tmp_path):
    hooks = load_hooks()
    (tmp_path / "NOTES.md").write_text("one\n<!-- --8<-- [start:mid] -->\ntwo [a](x.md)\n<!-- --8<-- [end:mid] -->\n"
                                       "three\n")
    page = 'A\n--8<-- "NOTES.md:mid"\nB\n  --8<-- "NOTES.md:4:5"\n```\n--8<-- "NOTES.md"\n```\n'
    assert hooks.expand_includes(page, tmp_path, "docs", "page.md") == \
        'A\ntwo [a](../x.md)\nB\n  three\n```\n--8<-- "NOTES.md"\n```\n'
