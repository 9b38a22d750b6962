"""Every module a docstring, a comment or a page names exists (issue 41, item 5): a file (model/gpt.py,
modern_gpt/core/settings.py, bench_smoke.py) or a dotted name (modern_gpt.ablation.running.start). After a
move, a reader who follows a stale name (model.py, cli.py, executors.py) finds nothing."""

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if not {".git", ".venv"} & set(p.parts)]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
USERS_OWN = {"my.py", "mine.py", "my_norm.py"}  # the reader's files in examples, not ours
FILE_REF = re.compile(r"(?<![\w./-])((?:\w+/)*[A-Za-z_]\w*\.py)\b")
DOTTED = re.compile(r"\bmodern_gpt(?:\.[A-Za-z_]\w*)+")


def texts(path: Path):
    """(line, text) of each docstring and comment of a Python file."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if doc := ast.get_docstring(node, clean=False):
                yield getattr(node, "lineno", 1), doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def file_exists(ref: str) -> bool:
    """A bare name is a file anywhere in the clone; a path with folders ends one (verdict/ladder.py)."""
    if ref in USERS_OWN or any(Path(part).stem.isupper() for part in ref.split("/")):  # trackers/NAME.py: a pattern
        return True
    return any(f == ref or f.endswith("/" + ref) for f in FILES)


def dotted_exists(ref: str) -> bool:
    """modern_gpt.a.b.name: each package a folder, then a module file that defines or imports the next name."""
    where = ROOT / "modern_gpt"
    parts = ref.split(".")[1:]
    for i, part in enumerate(parts):
        if (where / part).is_dir():
            where = where / part
            continue
        module = where / f"{part}.py"
        if module.is_file():
            return i + 1 == len(parts) or re.search(rf"\b{parts[i + 1]}\b", module.read_text()) is not None
        return re.search(rf"\b{part}\b", (where / "__init__.py").read_text()) is not None  # a lazy name
    return True


def named():
    """(where, reference, exists) for every module named in the package's prose and the pages."""
    sources = [(p, texts(p)) for p in sorted((ROOT / "modern_gpt").rglob("*.py"))]
    sources += [(p, enumerate(p.read_text(encoding="utf-8").splitlines(), 1)) for p in PAGES]
    for path, lines in sources:
        for line, text in lines:
            where = f"{path.relative_to(ROOT)}:{line}"
            yield from ((where, ref, file_exists(ref)) for ref in FILE_REF.findall(text))
            yield from ((where, ref, dotted_exists(ref)) for ref in DOTTED.findall(text))


def test_every_module_named_in_prose_exists():
    missing = [f"{where}: {ref}" for where, ref, exists in named() if not exists]
    assert not missing, "names of modules that do not exist:\n" + "\n".join(missing)


def test_the_check_finds_a_stale_name():
    assert not file_exists("model.py") and not file_exists("cli.py") and not file_exists("executors.py")
    assert file_exists("model/gpt.py") and file_exists("verdict/ladder.py") and file_exists("bench_smoke.py")
    assert dotted_exists("modern_gpt.ablation.running") and dotted_exists("modern_gpt.judge")
    assert not dotted_exists("modern_gpt.running") and not dotted_exists("modern_gpt.model.Block")
