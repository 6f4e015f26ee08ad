"""No import cycles among the operator's modules nor the trainer's (issue 55): every import counts, those under
TYPE_CHECKING and inside functions too, since a cycle is a tangle to read whether or not Python trips on it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root`, by its dotted name."""
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            subs = {f"{module}.{a.name}" for a in node.names} & known.keys()
            found |= subs
            if module in known and len(subs) < len(node.names):  # names from the module itself
                found.add(module)
    return found - {name}


def cycles(root: Path, package: str) -> list[list[str]]:
    """The import cycles of `package`: each strongly connected set of its modules, sorted."""
    known = modules(root, package)
    graph = {name: imported(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                out.append(sorted([*component, v]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_neither_the_operator_nor_the_trainer_has_an_import_cycle() -> None:
    assert cycles(ROOT / "operator", "ringleader_operator") == []
    assert cycles(ROOT / "trainer-image", "ringleader_trainer") == []


def test_a_cycle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import B\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    (package / "c.py").write_text("from . import a\n")
    assert cycles(tmp_path, "pkg") == [["pkg.a", "pkg.b"]]
