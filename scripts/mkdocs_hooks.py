"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml) and the Griffe extension its API pages use.

- **Includes.** A line ``--8<-- "PATH"`` outside a code block (pymdownx.snippets' syntax, PATH from the repository
  root, optionally ``PATH:SECTION`` or ``PATH:START:END``) is replaced by that Markdown file before the page is
  rendered, its relative links rebased from PATH's folder to the page's, so ``docs/benchmarks.md`` can be the one
  line ``--8<-- "BENCHMARKS.md"``. Other snippet lines (inside code blocks) are left to pymdownx.snippets.
- **Links to repository files.** A relative link from a page to a path of the repository outside ``docs/``
  (``[the corpus recipe](../../downstream/README.md)``) becomes the page of the site that includes that file
  (``../BENCHMARKS.md`` -> the Benchmarks page), else a link to ``repo_url`` when mkdocs.yml sets one, else the
  link text and a code span naming the path; an image there is copied into the site. A link to a path that does
  not exist fails the build, naming page and link.
- **CLI reference.** A line ``<!-- argparse: MODULE:FUNCTION -->`` is replaced by the reference of the parser
  that ``FUNCTION()`` builds: one section per command and subcommand with its description, usage, a table of its
  options and its notes, so the page cannot drift from the code.
- **API coverage.** A line ``<!-- public-api: PACKAGE -->`` fails the build when a name of ``PACKAGE.__all__``
  has no ``::: PACKAGE.NAME`` block on that page.
- **reST roles in docstrings** (``:func:`name```, ``:class:`~a.b.C```): :class:`ReSTRoles`, a Griffe extension,
  renders them as code spans that link to the object where the site documents it.
"""

from __future__ import annotations

import argparse
import html
import importlib
import logging
import os
import posixpath
import re
import textwrap
import xml.etree.ElementTree as etree
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import griffe
from markdown import Extension
from markdown import util as markdown_util
from markdown.treeprocessors import Treeprocessor
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.repository")

#: Where images of the repository outside docs/ are copied in the built site.
REPOSITORY_ASSETS = "assets/repository"
#: Width of the usage lines on the CLI page (argparse wraps them; fixed so the page does not depend on a terminal).
USAGE_WIDTH = 100

INCLUDE_LINE = re.compile(r'^(?P<indent>[ \t]*)-{2,}8<-{2,}[ \t]+"(?P<spec>[^"]+)"[ \t]*$')
ARGPARSE_MARKER = re.compile(r"^<!--\s*argparse:\s*(?P<target>[\w.]+:\w+)\s*-->[ \t]*$", re.M)
PUBLIC_API_MARKER = re.compile(r"^<!--\s*public-api:\s*(?P<package>[\w.]+)\s*-->[ \t]*$", re.M)
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
#: ``](url)`` / ``](url "title")`` of an inline link or image, and ``[id]: url`` of a reference definition.
INLINE_TARGET = re.compile(r"(\]\(\s*<?)([^)\s>]+)(>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\))")
#: What Python-Markdown puts in the tree for raw HTML stashed away (inline code of pymdownx.inlinehilite).
STASH_PLACEHOLDER = re.compile(re.escape(markdown_util.HTML_PLACEHOLDER).replace("%s", r"(\d+)"))
REFERENCE_TARGET = re.compile(r"^([ \t]{0,3}\[[^\]]+\]:[ \t]*<?)(\S+?)(>?(?:[ \t]|$))", re.M)


class _State:
    """What the hooks share during one build (MkDocs renders the pages one after another)."""

    root = Path(".")
    docs_dir = Path("docs")
    config = None
    files = None
    page = None
    included: Dict[str, str] = {}          # repository path -> src_uri of the page that includes it whole
    errors: List[str] = []


STATE = _State()


# -- hooks ---------------------------------------------------------------------------------------------------------

def on_config(config):
    STATE.root = Path(os.path.abspath(config.config_file_path)).parent    # symbolic links kept: a linked copy
    STATE.docs_dir = Path(os.path.abspath(config.docs_dir))              # of the repository is built as itself
    STATE.config = config
    STATE.errors = []
    config.markdown_extensions.append(_RepositoryLinksExtension())
    return config


def on_files(files, config):
    """Which root files a page includes whole, so links to them go to that page."""
    STATE.files = files
    STATE.included = {}
    for file in files.documentation_pages():
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for line in _lines_outside_fences(text):
            match = INCLUDE_LINE.match(line)
            if match and ":" not in match["spec"]:
                STATE.included.setdefault(posixpath.normpath(match["spec"]), file.src_uri)
    return files


def on_page_markdown(markdown, page, config, files):
    STATE.page, STATE.files = page, files
    where = _page_repository_dir(page)
    markdown = expand_includes(markdown, STATE.root, where, page.file.src_uri)
    markdown = ARGPARSE_MARKER.sub(lambda m: cli_reference(_load_object(m["target"])()), markdown)
    for match in PUBLIC_API_MARKER.finditer(markdown):
        for name in missing_api_names(markdown, match["package"]):
            _error(f"{page.file.src_uri}: {match['package']}.{name} is in {match['package']}.__all__ but the page "
                   f"has no '::: {match['package']}.{name}'")
    return markdown


def on_env(env, config, files):
    """Every page is rendered by now: stop here when a link, an include or an API page was wrong."""
    if STATE.errors:
        raise PluginError(f"{len(STATE.errors)} error(s) in the documentation, the first: {STATE.errors[0]}")
    return env


def _error(message: str) -> None:
    STATE.errors.append(message)
    log.error(message)


def _page_repository_dir(page) -> str:
    """The page's folder as a repository path (``docs/how-to``)."""
    docs = posixpath.relpath(STATE.docs_dir.as_posix(), STATE.root.as_posix())
    return posixpath.normpath(posixpath.join(docs, posixpath.dirname(page.file.src_uri)))


# -- includes ------------------------------------------------------------------------------------------------------

def expand_includes(text: str, root: Path, where: str, page: str, depth: int = 0) -> str:
    """Replace each include line outside a code block by the file it names (from ``root``), with its relative
    links rebased from the file's folder to ``where`` (both repository paths)."""
    out: List[str] = []
    in_fence = None
    for line in text.splitlines(keepends=True):
        in_fence, was_code = _fence_state(line, in_fence)
        match = None if was_code else INCLUDE_LINE.match(line.rstrip("\n"))
        if match is None:
            out.append(line)
            continue
        spec = match["spec"]
        path, _, selection = spec.partition(":")
        file = root / path
        if not file.is_file():
            _error(f"{page}: include '{spec}': {path} does not exist in the repository")
            continue
        included = _select(file.read_text(encoding="utf-8"), selection, page, spec)
        included = rebase_links(included, posixpath.dirname(posixpath.normpath(path)), where)
        if depth < 4:
            included = expand_includes(included, root, where, page, depth + 1)
        indent = match["indent"]
        out.append("".join(indent + part if part.strip() else part for part in included.splitlines(keepends=True)))
        if not out[-1].endswith("\n"):
            out[-1] += "\n"
    return "".join(out)


def _select(text: str, selection: str, page: str, spec: str) -> str:
    """The lines a snippet selection names: ``""`` (all), ``NAME`` (between ``--8<-- [start:NAME]`` and
    ``--8<-- [end:NAME]``) or ``START:END`` (1-based line numbers, both included, either left out: from the first
    or to the last); section marker lines are dropped as pymdownx.snippets drops them."""
    lines = text.splitlines(keepends=True)
    if selection and re.fullmatch(r"\d*(:\d*)?", selection):
        start, _, end = selection.partition(":")
        lines = lines[int(start or 1) - 1:int(end) if end else None]
    elif selection:
        begin = [i for i, line in enumerate(lines) if f"--8<-- [start:{selection}]" in line]
        finish = [i for i, line in enumerate(lines) if f"--8<-- [end:{selection}]" in line]
        if not begin or not finish:
            _error(f"{page}: include '{spec}': no section '{selection}'")
            return ""
        lines = lines[begin[0] + 1:finish[0]]
    return "".join(line for line in lines if not re.search(r"--8<-- \[(start|end):[^\]]*\]", line))


def rebase_links(text: str, from_dir: str, to_dir: str) -> str:
    """Relative link targets of Markdown written in repository folder ``from_dir``, rewritten for ``to_dir``
    (code blocks and code spans untouched)."""
    if posixpath.normpath(from_dir or ".") == posixpath.normpath(to_dir or "."):
        return text

    def rebase(url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme or parts.netloc or not parts.path or url.startswith(("/", "#")):
            return url
        target = posixpath.normpath(posixpath.join(from_dir, parts.path))
        path = posixpath.relpath(target, to_dir or ".")
        return urlunsplit(("", "", path, parts.query, parts.fragment))

    def prose(chunk: str) -> str:
        chunk = INLINE_TARGET.sub(lambda m: m[1] + rebase(m[2]) + m[3], chunk)
        return REFERENCE_TARGET.sub(lambda m: m[1] + rebase(m[2]) + m[3], chunk)

    return "".join(chunk if code else prose(chunk) for code, chunk in split_code(text))


def split_code(text: str) -> Iterator[Tuple[bool, str]]:
    """``(is_code, chunk)`` pieces of Markdown, in order: fenced blocks and code spans are code."""
    prose: List[str] = []
    in_fence = None
    for line in text.splitlines(keepends=True):
        in_fence, was_code = _fence_state(line, in_fence)
        if was_code:
            if prose:
                yield from _split_spans("".join(prose))
                prose = []
            yield True, line
        else:
            prose.append(line)
    if prose:
        yield from _split_spans("".join(prose))


def _split_spans(text: str) -> Iterator[Tuple[bool, str]]:
    end = 0
    for match in INLINE_CODE.finditer(text):
        yield False, text[end:match.start()]
        yield True, match[0]
        end = match.end()
    yield False, text[end:]


def _fence_state(line: str, in_fence: Optional[str]) -> Tuple[Optional[str], bool]:
    """(the open fence after ``line``, whether ``line`` is code: a fence line or inside a fenced block)."""
    match = FENCE.match(line)
    if in_fence is None:
        return (match["fence"], True) if match else (None, False)
    if match and match["fence"][0] == in_fence[0] and len(match["fence"]) >= len(in_fence) \
            and not line.strip()[len(match["fence"]):].strip():
        return None, True
    return in_fence, True


def _lines_outside_fences(text: str) -> Iterator[str]:
    in_fence = None
    for line in text.splitlines():
        in_fence, was_code = _fence_state(line, in_fence)
        if not was_code:
            yield line


# -- links to repository files -------------------------------------------------------------------------------------

class _RepositoryLinks(Treeprocessor):
    """Runs before MkDocs' own link check (``relpath``, priority 0), which then sees only links inside docs/."""

    def run(self, root):
        page = STATE.page
        if page is None:
            return
        where = _page_repository_dir(page)
        for element in root.iter():
            if element.tag == "a" and element.get("href"):
                self._link(element, where, page)
            elif element.tag == "img" and element.get("src"):
                self._image(element, where, page)

    def _target(self, url: str, where: str, page) -> Optional[Tuple[str, str]]:
        """(repository path, anchor) of a relative link that leaves docs/, else None."""
        parts = urlsplit(url)
        if parts.scheme or parts.netloc or not parts.path or url.startswith(("/", "\\")):
            return None
        target = posixpath.normpath(posixpath.join(where, parts.path))
        docs = posixpath.relpath(STATE.docs_dir.as_posix(), STATE.root.as_posix())
        if target == docs or target.startswith(docs + "/"):
            return None
        if target == ".." or target.startswith("../"):
            _error(f"{page.file.src_uri}: link '{url}' points outside the repository")
            return None
        if not (STATE.root / target).exists():
            _error(f"{page.file.src_uri}: link '{url}' points to {target}, which does not exist in the repository")
            return None
        return target, parts.fragment

    def _link(self, element, where: str, page) -> None:
        url = element.get("href")
        found = self._target(url, where, page)
        if found is None:
            return
        target, anchor = found
        if target in STATE.included:        # a root file the site includes: its page
            docs_page = posixpath.relpath(STATE.included[target], posixpath.dirname(page.file.src_uri) or ".")
            element.set("href", docs_page + (f"#{anchor}" if anchor else ""))
            return
        shown = target + ("/" if (STATE.root / target).is_dir() else "")
        repo_url = STATE.config.repo_url if STATE.config else None
        if repo_url:
            branch = STATE.config.extra.get("repo_branch", "main")
            kind = "tree" if (STATE.root / target).is_dir() else "blob"
            element.set("href", f"{repo_url.rstrip('/')}/{kind}/{branch}/{target}" + (f"#{anchor}" if anchor else ""))
            return
        text = self._plain_text(element)
        element.tag = "span"
        element.attrib.clear()
        code = etree.Element("code")
        code.text = shown
        if text in (target, shown, url):
            element.text = None
            for child in list(element):
                element.remove(child)
            element.append(code)
            return
        if len(element):
            last = element[-1]
            last.tail = (last.tail or "") + " ("
        else:
            element.text = (element.text or "") + " ("
        code.tail = ")"
        element.append(code)

    def _plain_text(self, element) -> str:
        """The element's text as shown, with what other extensions stashed (inline code) put back."""
        def unstash(match):
            raw = self.md.htmlStash.rawHtmlBlocks[int(match[1])]
            return html.unescape(re.sub(r"<[^>]+>", "", str(raw)))

        return STASH_PLACEHOLDER.sub(unstash, "".join(element.itertext())).strip()

    def _image(self, element, where: str, page) -> None:
        found = self._target(element.get("src"), where, page)
        if found is None:
            return
        target, _ = found
        if not (STATE.root / target).is_file():
            _error(f"{page.file.src_uri}: image '{element.get('src')}' is a folder")
            return
        src_uri = f"{REPOSITORY_ASSETS}/{target}"
        if STATE.files is not None and src_uri not in STATE.files.src_uris:
            STATE.files.append(File.generated(STATE.config, src_uri, abs_src_path=str(STATE.root / target)))
        element.set("src", posixpath.relpath(src_uri, posixpath.dirname(page.file.src_uri) or "."))


class _RepositoryLinksExtension(Extension):
    def extendMarkdown(self, md):
        md.treeprocessors.register(_RepositoryLinks(md), "repository_links", 2)


# -- the CLI reference ---------------------------------------------------------------------------------------------

def _load_object(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def cli_reference(parser: argparse.ArgumentParser, level: int = 2) -> str:
    """Markdown reference of ``parser`` and of every subcommand under it, depth first in the order ``--help``
    lists them: a heading per command, its description, usage, options (one table per argument group) and
    notes (the epilog)."""
    sections: List[str] = []
    _command_sections(parser, None, level, sections)
    return "\n".join(sections)


def _command_sections(parser, summary: Optional[str], level: int, out: List[str]) -> None:
    out.append(f"{'#' * min(level, 6)} {parser.prog}\n")
    if summary:
        out.append(_prose(summary[:1].upper() + summary[1:]))
    if parser.description:
        out.append(_prose(parser.description))
    out.append(f"```text\n{_usage(parser).rstrip()}\n```\n")
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subcommands:
        out.append("| Command | Description |\n|---|---|")
        for choice in action._choices_actions:
            prog = action.choices[choice.dest].prog
            anchor = re.sub(r"[^\w-]", "", prog.replace(" ", "-")).lower()
            out.append(f"| [{_code(prog)}](#{anchor}) | {_escape(choice.help or '')} |")
        out.append("")
    formatter = _formatter(parser)
    for group in parser._action_groups:
        rows = [a for a in group._group_actions
                if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._SubParsersAction,
                                                                      argparse._HelpAction))]
        if not rows:
            continue
        title = _group_title(group.title)
        out.append(f"**{_escape(title)}**\n")
        out.append(f"| {'Argument' if title == 'Arguments' else 'Option'} | Default | Description |\n|---|---|---|")
        for action in rows:
            flags = formatter._format_action_invocation(action)
            help_text = formatter._expand_help(action) if action.help else ""
            if action.required and action.option_strings:
                help_text = f"required; {help_text}" if help_text else "required"
            out.append(f"| {_code(flags)} | {_default(action)} | {_escape(' '.join(help_text.split()))} |")
        out.append("")
    if parser.epilog:
        out.append(_prose(parser.epilog))
    for action in subcommands:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            _command_sections(sub, helps.get(name), level + (0 if " " not in parser.prog else 1), out)


def _group_title(title: Optional[str]) -> str:
    title = {"positional arguments": "arguments", "optional arguments": "options"}.get(title or "", title or "")
    return title[:1].upper() + title[1:]


def _formatter(parser):
    formatter_class = parser.formatter_class
    try:
        return formatter_class(prog=parser.prog, width=USAGE_WIDTH)
    except TypeError:
        return argparse.HelpFormatter(prog=parser.prog, width=USAGE_WIDTH)


def _usage(parser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help()


def _default(action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._CountAction,
                           argparse._VersionAction)):
        return ""
    default = action.default
    if default is None or default is argparse.SUPPRESS or default == [] or default is False:
        return ""
    return _code(str(default))


def _prose(text: str) -> str:
    """argparse text (a description, an epilog) as Markdown: paragraphs of plain lines joined and escaped,
    paragraphs with indented lines (examples, layouts) kept verbatim in a text block."""
    blocks = []
    for paragraph in re.split(r"\n[ \t]*\n", textwrap.dedent(text).strip("\n")):
        lines = paragraph.splitlines()
        if any(line[:1] in (" ", "\t") for line in lines):
            blocks.append(f"```text\n{paragraph.rstrip()}\n```\n")
        else:
            blocks.append(_escape(" ".join(" ".join(lines).split())) + "\n")
    return "\n".join(blocks)


def _escape(text: str) -> str:
    text = re.sub(r"([\\`*_\[\]|])", r"\\\1", text)
    return text.replace("<", "&lt;")


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


# -- API coverage --------------------------------------------------------------------------------------------------

def missing_api_names(markdown: str, package: str) -> List[str]:
    """Names of ``package.__all__`` that ``markdown`` has no ``::: package.NAME`` block for."""
    documented = set(re.findall(rf"^:::\s*{re.escape(package)}\.(\w+)\s*$", markdown, re.M))
    return [name for name in importlib.import_module(package).__all__ if name not in documented]


# -- reST roles in docstrings --------------------------------------------------------------------------------------

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`(?P<tilde>~?)(?P<name>[\w.]+)`")


class ReSTRoles(griffe.Extension):
    """Docstrings written with Sphinx roles (``:func:`spectrum```, ``:class:`~behavioral_pq.core.module.Module```)
    shown as code spans, linked to the object where the site documents it (an optional cross-reference: no link,
    no warning, where it does not), and reST literal blocks (``Example::`` and an indented block) as fenced code
    blocks (``pycon`` for a doctest session)."""

    def rewrite(self, *, pkg, **kwargs) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                text = ROLE.sub(lambda m: _role(obj, m), obj.docstring.value)
                obj.docstring.value = literal_blocks(text)


# the event after a package is loaded: on_package in recent Griffe, on_package_loaded in older versions
setattr(ReSTRoles, "on_package" if hasattr(griffe.Extension, "on_package") else "on_package_loaded",
        ReSTRoles.rewrite)


def literal_blocks(text: str) -> str:
    """reST literal blocks as fenced code blocks: ``Text::`` -> ``Text:`` (a lone ``::`` goes) and the indented
    block after it, fenced."""
    lines = text.split("\n")
    out: List[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        start = i + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        base = _indentation(line)
        if not line.rstrip().endswith("::") or start == i + 1 or start >= len(lines) \
                or _indentation(lines[start]) <= base:
            out.append(line)
            i += 1
            continue
        end = start
        while end < len(lines) and (not lines[end].strip() or _indentation(lines[end]) > base):
            end += 1
        while not lines[end - 1].strip():
            end -= 1
        head = line.rstrip()[:-2]
        out.append(head.rstrip() if not head.strip() or head.endswith(" ") else head + ":")
        block = textwrap.dedent("\n".join(lines[start:end])).split("\n")
        pad = " " * base
        out += ["", pad + "```" + ("pycon" if block[0].startswith(">>>") else "text")]
        out += [pad + line if line else line for line in block] + [pad + "```"]
        i = end
    return "\n".join(out)


def _indentation(line: str) -> int:
    return len(line) - len(line.lstrip())


def _walk(obj) -> Iterator:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def _role(obj, match) -> str:
    name = match["name"].lstrip(".")
    shown = name.rsplit(".", 1)[-1] if match["tilde"] else name
    head, _, rest = name.partition(".")
    scope = obj if obj.is_module or obj.is_class else obj.parent
    try:
        identifier = scope.resolve(head) + (f".{rest}" if rest else "")
    except Exception:  # noqa: BLE001 - a name Griffe cannot place: plain code
        if "." not in name or not name.startswith(obj.package.name + "."):
            return f"``{shown}``"
        identifier = name
    return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'
