"""The house rules that a reader of the package relies on, checked on the source: no function past about 60
lines (ruff's C901 holds complexity at 15), no import circle between the package's modules, and the folders'
floors: each folder imports only folders below it, and the floors that must never load torch or pandas do not.
Imports made inside functions count too (a late import still ties two modules together)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "modern_gpt"
MAX_LINES = 60

# The folders from the ground up: each may import the folders listed for it, and nothing above.
FLOORS = {
    "core": set(),
    "verdict": {"core"},
    "data": {"core"},
    "model": {"core"},
    "run": {"core", "data", "model"},
    "hf": {"core", "data", "model", "run"},
    "trackers": {"core", "verdict"},
    "ablation": {"core", "verdict", "data", "model", "run", "trackers"},
    "views": {"core", "verdict", "data", "model", "run", "hf", "trackers", "ablation"},  # what a user sees
    "cli": {"core", "verdict", "data", "model", "run", "hf", "trackers", "ablation", "views", "api"},
}
TOP = {"__init__", "__main__", "api"}  # the package's face: the Python API, the console script
# What a floor never imports, at any depth (a late import inside a function included).
NEVER = {"core": {"torch", "pandas", "numpy"}, "verdict": {"torch"}}


def _modules() -> dict[str, ast.Module]:
    """Every module of the package by its dotted name below modern_gpt ('core.config', '__init__')."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts)] = ast.parse(p.read_text(encoding="utf-8"))
    return out


def test_no_function_is_longer_than_a_screen():
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]
    assert not long, long


def _targets(name: str, tree: ast.Module) -> set[str]:
    """The absolute names every import of module `name` reaches: 'modern_gpt.core.config', 'torch', ..."""
    package = ["modern_gpt", *name.split(".")[:-1]]
    if name.endswith("__init__"):
        package = ["modern_gpt", *name.split(".")[:-1]]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if node.module is None or module == "modern_gpt":  # from . import x: x may be a module
                out |= {f"{module}.{a.name}" for a in node.names}
            out.add(module)
    return out


def _internal(targets: set[str], modules: dict) -> set[str]:
    """The package's own modules among the targets, by dotted name below modern_gpt."""
    names = {t.removeprefix("modern_gpt.") for t in targets if t.startswith("modern_gpt.")}
    return {n for n in names if n in modules} | {n + ".__init__" for n in names if n + ".__init__" in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _internal(_targets(name, tree), modules) - {name} for name, tree in modules.items()}


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


def _folder(module: str) -> str:
    return module.split(".")[0] if "." in module else module


def test_the_package_has_no_import_circle():
    graph = {k: {m for m in v if not m.endswith("__init__")} for k, v in _graph().items() if k != "__init__"}
    assert not _circles(graph), _circles(graph)


def test_the_circle_finder_finds_a_circle():  # the negative control: a circle it must not miss
    assert _circles({"planning": {"results"}, "results": {"stats", "planning"}, "stats": set()})
    assert not _circles({"planning": {"results"}, "results": {"stats"}, "stats": set()})


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a folder to one that is not below it, as 'a.b -> c.d'."""
    bad = []
    for module, targets in graph.items():
        here = _folder(module)
        if here in TOP:
            continue
        assert here in FLOORS, f"{module} is in a folder that FLOORS does not place: {here}"
        for t in targets:
            there = _folder(t)
            if there != here and there not in FLOORS[here]:
                bad.append(f"{module} -> {t}")
    return sorted(bad)


def test_every_folder_imports_only_folders_below_it():
    assert upward(_graph()) == []


def test_the_floor_check_finds_an_import_that_runs_up():  # the negative control
    assert upward({"core.config": {"verdict.stats"}, "verdict.stats": {"core.errors"}}) == [
        "core.config -> verdict.stats"
    ]


def _reach(name: str, graph: dict[str, set[str]]) -> set[str]:
    """The package's modules that importing `name` can load, itself included."""
    seen, todo = {name}, [name]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def banned_imports(modules: dict, never: dict[str, set[str]]) -> list[str]:
    """'module -> library' for each library a floor must never load, by any chain of imports."""
    graph = {name: _internal(_targets(name, tree), modules) - {name} for name, tree in modules.items()}
    found = set()
    for name in modules:
        banned = never.get(_folder(name), set())
        for through in _reach(name, graph) if banned else ():
            found |= {
                f"{name} -> {t.split('.')[0]}" for t in _targets(through, modules[through]) if t.split(".")[0] in banned
            }
    return sorted(found)


def test_the_floors_that_never_load_torch_or_pandas_do_not():
    assert banned_imports(_modules(), NEVER) == []


def test_the_banned_import_check_follows_a_chain():  # the negative control
    modules = {
        n: ast.parse(src) for n, src in (("core.a", "from . import b"), ("core.b", "def f():\n    import torch"))
    }
    assert banned_imports(modules, {"core": {"torch"}}) == ["core.a -> torch", "core.b -> torch"]


def test_every_folder_is_a_package_of_its_own():
    folders = {p.parent for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE}
    assert {f.relative_to(PACKAGE).parts[0] for f in folders} == set(FLOORS) - {"api"}
    assert all((f / "__init__.py").is_file() for f in folders)


# The annex's bounds (issue 41): the product is the house; the plugin loader, the trackers, the share page, the
# executors and the entry point stay this size or less. A feature that needs more says so here, in review.
BOUNDS = {
    "model/plugins.py": 400,
    "trackers": 1_100,
    "views/page.py": 700,
    "ablation/executors": 1_100,
    "__main__.py": 60,
}


def _lines(part: str) -> int:
    path = PACKAGE / part
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)


def test_the_annex_stays_within_its_bounds():
    over = {part: _lines(part) for part, most in BOUNDS.items() if _lines(part) > most}
    assert not over, f"over issue 41's bounds {BOUNDS}: {over}"
    assert all(_lines(part) > most // 4 for part, most in BOUNDS.items())  # each path exists and is counted
