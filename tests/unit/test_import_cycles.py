"""No import cycle in the product or the harness, counting every import (issue 38).

import-linter's layers keep the big arrows pointing one way, but a cycle between two
modules of one layer slips through, and its own graph leaves out what a module imports
under ``TYPE_CHECKING`` or inside a function: exactly where a cycle hides once someone
"fixes" it. This test reads every module's source (:mod:`ast`, nothing imported), takes
each ``import``/``from ... import`` wherever it stands, and looks for strongly connected
components (Tarjan) among the modules of ``slonkd`` and ``slonkd_sandbox``. An edge goes to
the module named (``from pkg import name`` to ``pkg.name`` when that is a module, else to
``pkg``); a package's ``__init__`` is the package itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("slonkd", "slonkd_sandbox")


def _modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """(base, name) pairs of every import in ``tree``: ``name`` empty for ``import base``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                yield base, alias.name


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the two packages it imports, anywhere in its source."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for base, item in _imported(tree, name, path.name == "__init__.py"):
            target = f"{base}.{item}" if item and f"{base}.{item}" in modules else base
            while target and target not in modules:  # import a.b.c where c is a name
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def test_the_finder_sees_a_cycle_hidden_under_type_checking_or_in_a_function(
    tmp_path: Path,
) -> None:
    """The finder counts what import-linter's graph leaves out (and fails on it)."""
    pkg = tmp_path / "slonkd_sandbox"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from slonkd_sandbox.b import B\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from slonkd_sandbox import a\n")
    (tmp_path / "slonkd").mkdir()
    (tmp_path / "slonkd" / "__init__.py").write_text("")
    graph = import_graph(tmp_path)
    assert graph["slonkd_sandbox.a"] == {"slonkd_sandbox.b"}
    assert graph["slonkd_sandbox.b"] == {"slonkd_sandbox.a"}
    assert cycles(graph) == [["slonkd_sandbox.a", "slonkd_sandbox.b"]]


def test_no_import_cycle_in_the_product_or_the_harness() -> None:
    """Every module of both packages is outside every cycle (three in the harness before)."""
    found = cycles(import_graph())
    assert not found, "import cycles (every import counted): " + "; ".join(
        " <-> ".join(c) for c in found
    )
