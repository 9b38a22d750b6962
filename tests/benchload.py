"""A script of bench/ loaded as a module, as `python bench/NAME.py` runs it: with bench/ on the path, so that its
`from common import ...` finds bench/common.py."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "bench"


def load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
