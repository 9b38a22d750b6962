"""Every report and judge output of six kinds of results folder, byte for byte, against what the code printed
before the house's second edition (tests/golden/expected/, made at commit ecaec19 by this file with
GOLDEN_WRITE=1). The folders (meta.json, runs/ and runs.csv only) are those of real smoke ablations:

- ablate: the default cumulative plan, 3 seeds;
- lrs: a custom plan at two learning rates (--lrs), shown at each row's best and --at-lr;
- power: one architecture and its placebo;
- duel: classic against modern with --margin;
- auto: --seeds auto, two components, 2 to 4 seeds;
- damaged: the ablate folder with a run deleted, a run of another folder copied in and meta.json's status failed.

A redesign changes none of these bytes. Write them again (GOLDEN_WRITE=1) only for a change of output that is
meant, and say so in the commit.
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.clihelp import run_main

HERE = Path(__file__).parents[1] / "golden"
KINDS = ("ablate", "lrs", "power", "duel", "auto", "damaged")
FORMATS = ("table", "markdown", "csv", "json")
WIDTH = 200

CASES = {
    **{f"report-{k}.{f}": ("report", k, "--format", f) for k in KINDS for f in FORMATS},
    **{f"report-lrs-at.{f}": ("report", "lrs", "--at-lr", "1e-3", "--format", f) for f in FORMATS},
    **{
        f"judge-{k}.{f}": ("judge", f"{k}/runs.csv", "--placebo", "classic (placebo)", "--format", f)
        for k in KINDS
        for f in FORMATS
    },
    **{f"judge-ablate-margin.{f}": ("judge", "ablate/runs.csv", "--margin", "0.02", "--format", f) for f in FORMATS},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    where = tmp_path_factory.mktemp("golden")
    for kind in KINDS:
        shutil.copytree(HERE / "folders" / kind, where / kind)
    return where


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_byte_identical(name, folders, capsys, monkeypatch):
    from modern_gpt.cli import commands as cli

    monkeypatch.chdir(folders)
    monkeypatch.setattr(cli.console, "width", WIDTH)
    code, out, err = run_main(capsys, monkeypatch, *CASES[name])
    got = f"exit {code}\n--- stdout\n{out}--- stderr\n{err}"
    path = HERE / "expected" / name
    if os.environ.get("GOLDEN_WRITE"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("width", [60, 100])
def test_no_number_of_the_report_table_is_cut_in_a_narrow_terminal(width, folders, capsys, monkeypatch):
    """The table is wider than 60 columns: it wraps in the terminal rather than cutting a number with '…'."""
    import json

    from modern_gpt.cli import commands as cli

    monkeypatch.chdir(folders)
    monkeypatch.setattr(cli.console, "width", width)
    code, out, err = run_main(capsys, monkeypatch, "report", "ablate")
    assert code == 0, err
    code, doc, _ = run_main(capsys, monkeypatch, "report", "ablate", "--format", "json")
    rows = json.loads(doc)["rows"]
    assert "…" not in out
    for row in rows[1:]:
        for value in (f"{row['val_loss']:.4f}", f"{row['delta_val']:+.4f}", f"[{row['ci_low']:+.4f},"):
            assert value in out, (value, out)
        # on its name's line (a name may fold onto the next): rich dropped the variant column of a narrow table
        line = next(x for x in out.splitlines() if f"{row['delta_val']:+.4f}" in x)
        assert row["variant"].startswith(line.split()[0]), (row["variant"], line)
