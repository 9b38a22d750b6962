"""The table in a terminal of 80, 100 and 200 columns (issue 44, item 7): the full table where it fits, a
compact one where it does not (the CI as ±; train, spread, need and secs, then params, left to the files), and
the full table in every file and pipe; judge's table likewise. Golden outputs in tests/golden/expected/terminal-*."""

import io
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from tests.clihelp import run_main

HERE = Path(__file__).parents[1] / "golden"
WIDTHS = [80, 100, 200]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return Path(shutil.copytree(HERE / "folders" / "ablate", tmp_path_factory.mktemp("widths") / "ablate"))


def terminal(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=True, color_system=None, no_color=True), buf


@pytest.mark.parametrize("width", WIDTHS)
def test_report_in_a_terminal_is_golden(width, folder, capsys, monkeypatch):
    from modern_gpt.cli import commands as cli

    console, buf = terminal(width)
    monkeypatch.setattr(cli, "console", console)
    monkeypatch.chdir(folder.parent)
    code, out, err = run_main(capsys, monkeypatch, "report", "ablate")
    got = f"exit {code}\n--- stdout\n{buf.getvalue()}{out}--- stderr\n{err}"
    path = HERE / "expected" / f"terminal-{width}.table"
    if os.environ.get("GOLDEN_WRITE"):
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    table = buf.getvalue().split("\n- ")[0]  # the table, before its footnotes (which the terminal wraps)
    assert max(len(line) for line in table.splitlines()) <= width and "\x1b" not in got


def test_compact_below_the_full_width_full_at_it(folder):
    """The full table while it fits with its names folded (print_table folds them), the compact one below."""
    from modern_gpt.ablation import report
    from modern_gpt.ablation.results import ResultsDir
    from modern_gpt.views import render

    rep = report.load(ResultsDir(folder, read_only=True), None)
    full = render.rich_table(rep)
    least = render._natural_width(terminal(1000)[0], full) - sum(c.width - c.min_width for c in full.columns)
    headers = {w: [c.header for c in render.folder_table(terminal(w)[0], rep).columns] for w in (least - 1, least)}
    assert headers[least] == [c.header for c in full.columns]
    assert "Δ val ± 95% CI" in headers[least - 1] and "secs" not in headers[least - 1]


@pytest.mark.parametrize("width", WIDTHS)
def test_judge_in_a_terminal_is_golden(width, folder, capsys, monkeypatch):
    from modern_gpt.cli import commands as cli

    console, buf = terminal(width)
    monkeypatch.setattr(cli, "console", console)
    monkeypatch.chdir(folder.parent)
    code, out, err = run_main(capsys, monkeypatch, "judge", "ablate/runs.csv")
    got = f"exit {code}\n--- stdout\n{buf.getvalue()}{out}--- stderr\n{err}"
    path = HERE / "expected" / f"terminal-judge-{width}.table"
    if os.environ.get("GOLDEN_WRITE"):
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    table = buf.getvalue().split("\n- ")[0]
    assert max(len(line) for line in table.splitlines()) <= width and "\x1b" not in got


def test_a_file_or_pipe_gets_the_full_table_at_any_width(folder):
    from modern_gpt.ablation import report
    from modern_gpt.ablation.results import ResultsDir
    from modern_gpt.views import render

    rep = report.load(ResultsDir(folder, read_only=True), None)
    pipe = Console(file=io.StringIO(), width=60)  # not a terminal
    assert [c.header for c in render.folder_table(pipe, rep).columns] == [
        c.header for c in render.rich_table(rep).columns
    ]


def test_an_interval_not_centred_on_its_delta_is_shown_whole():
    from modern_gpt.verdict.design import SummaryRow
    from modern_gpt.views import render

    row = SummaryRow(variant="x", delta_val=-0.05, ci_low=-0.09, ci_high=-0.03)
    assert render.cell(row, "delta_val", "pm") == "-0.0500 [-0.0900, -0.0300]"
    row = SummaryRow(variant="x", delta_val=-0.06, ci_low=-0.09, ci_high=-0.03)
    assert render.cell(row, "delta_val", "pm") == "-0.0600 ± 0.0300"


@pytest.fixture(scope="module")
def ladder_csv(tmp_path_factory):
    """A simulated ladder of three rows at three rungs, three seeds (tests/ladder_sim.py), as judge reads one."""
    import numpy as np
    import pandas as pd

    from tests.ladder_sim import ladder

    loss, flops, _ = ladder(np.random.default_rng(0), 1, 3, [1.0, 2.0, 1.3], [0.0, 0.0, 0.1])
    rows = [
        dict(variant=v, seed=s, val_loss=loss[0, s, i, r], flops=flops[i, r])
        for s in range(3)
        for i, v in enumerate(["classic", "rope", "swiglu"])
        for r in range(3)
    ]
    path = tmp_path_factory.mktemp("ladder") / "ladder.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("width", [80, 200])
def test_the_scale_table_in_a_terminal_is_golden(width, ladder_csv, capsys, monkeypatch):
    from modern_gpt.cli import commands as cli

    console, buf = terminal(width)
    monkeypatch.setattr(cli, "console", console)
    monkeypatch.chdir(ladder_csv.parent)
    code, out, err = run_main(capsys, monkeypatch, "judge", "ladder.csv", "--compute-col", "flops")
    got = f"exit {code}\n--- stdout\n{buf.getvalue()}{out}--- stderr\n{err}"
    path = HERE / "expected" / f"terminal-scale-{width}.table"
    if os.environ.get("GOLDEN_WRITE"):
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")
    table = buf.getvalue().split("\n- ")[0]
    assert max(len(line) for line in table.splitlines()) <= width and "\x1b" not in got
