"""The house rules that a reader of the package relies on, checked on the source: no function past about 60
lines (ruff's C901 holds complexity at 15), and no import circle between the package's modules, counting the
imports made inside functions too (a late import still ties two modules together)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "modern_gpt"
MAX_LINES = 60


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.glob("*.py"))}


def test_no_function_is_longer_than_a_screen():
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]
    assert not long, long


def _imports(tree: ast.Module, names: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:  # from .x import y / from . import x
            targets = [node.module] if node.module else [a.name for a in node.names]
            out |= {t.split(".")[0] for t in targets if t.split(".")[0] in names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("modern_gpt."):
            out.add(node.module.split(".")[1])
    return out


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module that can reach itself through the graph, with one such path."""
    found = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    found.append(path + [start])
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_the_package_has_no_import_circle():
    modules = _modules()
    graph = {name: _imports(tree, set(modules)) - {name} for name, tree in modules.items()}
    graph.pop("__init__", None)
    graph = {k: v - {"__init__"} for k, v in graph.items()}
    assert not _circles(graph), _circles(graph)


def test_the_circle_finder_finds_a_circle():  # the negative control: a circle it must not miss
    assert _circles({"planning": {"results"}, "results": {"stats", "planning"}, "stats": set()})
    assert not _circles({"planning": {"results"}, "results": {"stats"}, "stats": set()})
