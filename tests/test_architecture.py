"""The package's layering, read from its imports (ast): no cycle, no upward import, package imports at the top.

Layers, lowest first (a module may import its own subpackage and any lower layer, never a higher one):

    errors, _version  <  config  <  core  <  artifacts  <  embedding  <  corpus  <  training
        <  tasks, lowering (peers: neither imports the other)  <  env  <  reports  <  cli

The root ``behavioral_pq/__init__.py`` is the public facade: it names the layers lazily and nothing imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "behavioral_pq"

RANKS = {
    "errors": 0, "_version": 0,
    "config": 1,
    "core": 2,
    "artifacts": 3,
    "embedding": 4,
    "corpus": 5,
    "training": 6,
    "tasks": 7, "lowering": 7,
    "env": 8,
    "reports": 9,
    "cli": 10, "__main__": 11,
}

# Function-level imports of the package that are there on purpose (module: why).
DEFERRED = {
    "behavioral_pq.core._worker": "the native core loads only after fd 1 is redirected",
    "behavioral_pq.env.llvm": "the encoder, and torch with it, loads only for the Spectrum, Codes and Embedding "
                              "observations: an environment's steps do not carry torch's objects under the garbage "
                              "collector",
}


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _read(root: Path) -> Dict[str, List[Tuple[str, bool]]]:
    """module -> its imports of the package, for every module under ``root``."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    return {name: _imports(path, modules, root) for name, path in modules.items()}


def _imports(path: Path, modules: Dict[str, Path], root: Path) -> List[Tuple[str, bool]]:
    """(imported package module, whether the import is inside a function) for each import of the package."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: List[Tuple[str, bool]] = []

    def resolve(base: str, names) -> List[str]:
        targets = []
        for alias in names:
            sub = f"{base}.{alias.name}"
            targets.append(sub if sub in modules else base)
        return targets

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, inside) for a in child.names if a.name.split(".")[0] == "behavioral_pq")
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - child.level + 1] + ([child.module] if child.module else []))
                else:
                    base = child.module or ""
                if base.split(".")[0] == "behavioral_pq":
                    found.extend((t, inside) for t in resolve(base, child.names))
            visit(child, nested)

    visit(ast.parse(path.read_text()), False)
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.fixture(scope="module")
def graph() -> Dict[str, List[Tuple[str, bool]]]:
    return _read(PACKAGE)


def test_every_module_has_a_layer(graph):
    unranked = sorted({_layer(m) for m in graph if m != "behavioral_pq"} - set(RANKS))
    assert not unranked, f"modules outside any layer: {unranked}; add them to RANKS (and the tree in docs/architecture.md)"


def test_no_upward_imports(graph):
    bad = []
    for source, targets in graph.items():
        if source == "behavioral_pq":
            continue
        for target, _ in targets:
            if target == "behavioral_pq":
                bad.append(f"{source} imports the root facade (import from the defining module)")
                continue
            a, b = _layer(source), _layer(target)
            if a != b and RANKS[b] >= RANKS[a]:
                bad.append(f"{source} ({a}) imports {target} ({b})")
    assert not bad, "\n".join(bad)


def test_no_import_cycles(graph):
    edges: Dict[str, Set[str]] = {m: {t for t, _ in ts if t in graph and t != m} if m != "behavioral_pq" else set()
                                  for m, ts in graph.items()}
    # Tarjan's strongly connected components
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    cycles: List[List[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    assert not cycles, f"import cycles: {cycles}"


def test_package_imports_are_at_module_top(graph):
    late = sorted({f"{source} imports {target} inside a function" for source, targets in graph.items()
                   for target, inside in targets
                   if inside and _layer(source) != "cli" and source not in DEFERRED})
    assert not late, "\n".join(late)


def test_the_checker_sees_violations(tmp_path):
    """The checks above can fail: a fake package with an upward import, a cycle and a late import trips them."""
    package = tmp_path / "behavioral_pq"
    for folder in ("core", "embedding"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "a.py").write_text("from behavioral_pq.embedding.b import x\n")
    (package / "embedding" / "b.py").write_text("from behavioral_pq.core import a\n\n\ndef f():\n"
                                                "    from behavioral_pq.core.a import y\n")
    fake = _read(package)
    with pytest.raises(AssertionError, match=r"core.a \(core\) imports behavioral_pq.embedding.b"):
        test_no_upward_imports(fake)
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_import_cycles(fake)
    with pytest.raises(AssertionError, match="inside a function"):
        test_package_imports_are_at_module_top(fake)


def test_every_error_class_lives_in_errors_and_is_a_bpq_error():
    import behavioral_pq.errors as errors

    elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert not elsewhere, f"error classes outside behavioral_pq/errors.py: {elsewhere}"
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) > 20
    for cls in classes:
        assert issubclass(cls, errors.BPQError), cls
        builtin = [b for b in cls.__mro__ if b.__module__ == "builtins" and b not in (Exception, BaseException, object)]
        assert cls is errors.BPQError or builtin, f"{cls.__name__} subclasses no fitting built-in error"


def test_public_surface_is_small_and_resolves():
    import behavioral_pq

    assert len(behavioral_pq.__all__) <= 20
    for name in behavioral_pq.__all__:
        assert getattr(behavioral_pq, name) is not None
