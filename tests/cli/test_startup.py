"""Start-up: help, argument errors and `params` never import torch (or pandas), and print what they printed when
torch was imported up front.

Each case runs in a fresh process through the real entry point (main(), as the console script calls it), which
then names the heavy modules it imported. The same cases run once more in a process that first imports torch,
pandas and the modules that need them, as the command line did before it deferred them: every case's exit
code, stdout and stderr must be the same there, so deferring an import changed no output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest
import typer

from modern_gpt.cli.commands import app

pytestmark = pytest.mark.slow

HEAVY = (
    "torch",
    "pandas",
    "matplotlib",
    "tokenizers",
    "safetensors",
    "pyarrow",
    "ray",
    "mlflow",
    "tensorboard",
    "wandb",
)
# What the command line imported before any command ran, before it deferred them.
EAGER = (
    "torch",
    "pandas",
    "modern_gpt.model.gpt",
    "modern_gpt.run.train",
    "modern_gpt.data.corpus",
    "modern_gpt.verdict.table",
    "modern_gpt.ablation.report",
    "modern_gpt.ablation.running",
)

# Runs each case of argv lists (JSON on stdin) through modern_gpt.cli.main: all in this one process, or with
# `fork` each in a child forked once cli.py is loaded, whose sys.modules is that of a fresh process that loaded
# cli.py (what the console script does first), without paying for a fresh interpreter per case. Prints a JSON
# list: per case its exit code, stdout, stderr and the heavy modules imported by then.
RUNNER = """
import contextlib, importlib, io, json, os, sys
cases, heavy, eager, fork = json.load(sys.stdin)
for name in eager:
    importlib.import_module(name)
from modern_gpt.cli import commands as cli


def run(argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.argv = ["modern-gpt", *argv]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            cli.main()
            code = 0
        except SystemExit as e:
            code = e.code
    loaded = sorted(m for m in heavy if m in sys.modules)
    return {"code": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(), "heavy": loaded}


def forked(argv):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(run(argv)).encode())  # a pipe write blocks until all is written
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        got = f.read()
    assert os.waitpid(pid, 0)[1] == 0, argv
    return json.loads(got)


sys.__stdout__.write(json.dumps([(forked if fork else run)(argv) for argv in cases]))
"""


def start_cases(cases: list[list[str]], eager: tuple[str, ...] = (), fork: bool = False) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": "120"}  # one width for help and tables, terminal or not
    with tempfile.TemporaryFile("w+") as given:
        json.dump([cases, HEAVY, eager, fork], given)
        given.seek(0)
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER],
            stdin=given,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )


def results(proc: subprocess.Popen) -> list[dict]:
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("startup")
    texts = {
        "syntax": "[model\ndim = 3\n",  # not TOML
        "type": '[model]\ndim = "wide"\n',
        "key": "[model]\nparallel_block = true\n",  # an unknown component is an unknown key
        "value": "[train]\nsteps = 0\n",
    }
    for name, text in texts.items():
        (d / f"{name}.toml").write_text(text)
    return {name: str(d / f"{name}.toml") for name in texts}


def commands() -> list[str]:
    return sorted(typer.main.get_command(app).commands)


def strict_cases(files: dict[str, str]) -> list[tuple[list[str], int]]:
    """(argv, exit code) of the cases that import none of HEAVY: help, the version, argument errors (a bad flag,
    a bad value, a bad TOML file, an unknown component) and every format of params."""
    helps = [["--help"], ["--version"], *([c, "--help"] for c in commands())]
    errors = [
        ["--bogus"],
        ["bogus"],
        ["train", "--bogus"],
        ["train", "--dim", "0"],
        ["train", "--steps", "many"],
        ["train", "--heads", "3"],
        ["train", "--device", "tpu"],
        ["train", "--tokenizer", "sentencepiece"],
        ["train", "--smoke", "--config", "mini"],
        ["train", "--config", "no-such-config"],
        ["train", "--track", "comet"],  # an unknown tracker: no tracker imported to say so
        ["ablate", "--mlflow-uri", "sqlite:///m.db"],
        ["generate", "checkpoint", "--seed", "-1"],
        ["report", "results", "--format", "xml"],
        ["params", "--format", "xml"],
        ["params", "--rope", "--dim", "12", "--heads", "4"],
        *(["params", "--config", path] for path in files.values()),
    ]
    params = [
        ["params"],
        ["params", "--format", "json"],
        ["params", "--modern", "--format", "table"],
        ["params", "--gqa", "--kv-heads", "1", "--config", "shakespeare", "--format", "json"],
    ]
    return [(a, 0) for a in helps] + [(a, 2) for a in errors] + [(a, 0) for a in params]


# The ablation commands' own flags are checked by planning, whose statistics (stats.py) need numpy: no torch and
# no pandas, though (report.py and running.py load after every check of the flags).
PLAN_ERRORS = [
    ["ablate", "--components", "rmsnorm,parallel_block"],
    ["ablate", "--plan", "custom", "--variants", "classic;nope"],
    ["ablate", "--seeds", "0"],
    ["ablate", "--jobs", "many"],
    ["duel", "--alpha", "2"],
    ["power", "--variant", "rope+nope"],
]


def test_help_argument_errors_and_params_import_no_torch_and_print_what_they_printed(files):
    strict = strict_cases(files)
    cases = [argv for argv, _ in strict] + PLAN_ERRORS
    codes = [code for _, code in strict] + [2] * len(PLAN_ERRORS)
    # the two processes at once (two cores): each prints only when all its cases are done
    lazy_proc = start_cases(cases, fork=True)  # a fresh fork each: what that case alone imports
    eager_proc = start_cases(cases, EAGER)
    lazy, eager = results(lazy_proc), results(eager_proc)
    for argv, code, got in zip(cases, codes, lazy, strict=True):
        allowed = {"numpy"} if argv in PLAN_ERRORS else set()
        assert set(got["heavy"]) <= allowed, (argv, got["heavy"])
        assert got["code"] == code, (argv, got)
        if code == 2:  # one sentence, no traceback
            assert got["stderr"].startswith("modern-gpt: error: ") and got["stderr"].count("\n") == 1, (argv, got)
        else:
            assert got["stdout"] and not got["stderr"], (argv, got)
    for argv, got, was in zip(cases, lazy, eager, strict=True):
        assert [got["code"], got["stdout"], got["stderr"]] == [was["code"], was["stdout"], was["stderr"]], argv
    # the eager process had them all loaded: else the comparison above compared nothing
    assert all({"torch", "pandas"} <= set(was["heavy"]) for was in eager)
    # the cases test what they name: a component the model does not have, params' numbers
    unknown = lazy[cases.index(["params", "--config", files["key"]])]["stderr"]
    assert "parallel_block" in unknown, unknown
    assert "parallel_block" in lazy[cases.index(PLAN_ERRORS[0])]["stderr"]
    assert json.loads(lazy[cases.index(["params", "--format", "json"])]["stdout"])["total"] > 0


@pytest.mark.slow
def test_ctrl_c_while_the_exit_handlers_run_is_a_quiet_exit(tmp_path):
    """Issue 31, item 7: Ctrl-C held down (or pressed twice) after the command's last line reached an exit
    handler, which printed its traceback after the clean line. An exit handler that receives SIGINT stands in."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import atexit, os, signal, sys, time\n"
        "import modern_gpt.cli.commands as c\n"
        "from modern_gpt import __main__ as m\n"
        "orig = c.main\n"
        "def main():\n"
        "    def again():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.5)\n"
        "    atexit.register(again)\n"
        "    orig()\n"
        "c.main = main\n"
        "sys.argv = ['modern-gpt', '--version']\n"
        "m.run()\n"
    )
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("modern-gpt ") and done.returncode == 130
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
