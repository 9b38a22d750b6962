"""The suite's own rules (issue 41, item 4): no test bounds wall time (a loaded machine fails it; a hang is
pytest-timeout's), and a plugin one test loads is never another's, whatever order pytest -n runs them in."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# a measured duration held under a bound: `time.time() - t0 < 30`, `result.seconds < 12`, `secs < 10`
DURATION_BOUND = re.compile(r"(time\(\)|monotonic\(\)|perf_counter\(\))\s*-\s*\w+\s*<|\b(seconds|secs|elapsed)\s*<")


def test_no_test_asserts_a_wall_time_bound():
    found = []
    for path in sorted(set(TESTS.rglob("*.py")) - {Path(__file__).resolve()}):  # this file names bounds
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assert) and DURATION_BOUND.search(ast.unparse(node.test)):
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert not found, f"wall-clock bounds (leave hangs to pytest-timeout): {found}"


def test_the_rule_finds_a_bound():
    assert DURATION_BOUND.search("time.time() - t0 < 30") and DURATION_BOUND.search("result.seconds < 12")
    assert not DURATION_BOUND.search("time.time() < deadline") and not DURATION_BOUND.search("len(err) < 300")


def test_a_plugin_loaded_here_is_registered():
    from modern_gpt.core.components import PLUGINS
    from modern_gpt.model import plugins

    plugins.load([TESTS.parent / "examples" / "components" / "relu2.py"])
    assert "relu2" in PLUGINS


def test_and_is_gone_in_the_next_test():
    """conftest.plugin_registry put the registry back after the test above (pytest keeps a file's order)."""
    from modern_gpt.core.components import PLUGINS

    assert "relu2" not in PLUGINS
