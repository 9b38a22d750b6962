"""Results folders and checkpoints that are missing, damaged, half-created, another command's or odd: one sentence
naming the file, nothing overwritten without --force, and no finished run lost."""

import json
import os

import pandas as pd
import torch

from tests.errhelp import ABLATE, TINY, assert_user_error, make_checkpoint, make_results, write


def test_unwritable_results_and_checkpoint_folders(run, tmp_path):
    blocker = write(tmp_path / "a-file", b"x")
    assert_user_error(run("ablate", "--smoke", "--steps", "2", "--out", blocker / "results"), "cannot write results to")
    assert_user_error(run("train", *TINY, "--out", blocker / "ckpt"), "cannot write the checkpoint to")


def test_resume_on_a_folder_that_is_not_results(run, tmp_path):
    assert_user_error(run("ablate", "--resume", tmp_path), "is not a results folder")
    assert_user_error(run("report", tmp_path), "is not a results folder")


def test_generate_on_bad_checkpoints(run, tmp_path):
    assert_user_error(run("generate", tmp_path / "none"), "is not a checkpoint folder (it does not exist)")
    assert_user_error(
        run("generate", tmp_path), "is not a checkpoint folder: model.safetensors, config.json, tokenizer.json missing"
    )
    ckpt = tmp_path / "ckpt"
    assert run("train", *TINY, "--out", ckpt)[0] == 0
    weights = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    assert_user_error(run("generate", ckpt), "model.safetensors is damaged or truncated")
    (ckpt / "model.safetensors").write_bytes(weights)
    (ckpt / "config.json").write_text('{"model": {"dim": ')
    assert_user_error(run("generate", ckpt), "config.json is damaged")


def test_a_damaged_runs_csv_changes_no_table_and_resume_rebuilds_it(run, tmp_path):
    folder = tmp_path / "r"
    variants = ["--plan", "custom", "--variants", "classic;rope"]
    assert run("ablate", "--smoke", "--jobs", "1", "--seeds", "1", "--steps", "2", *variants, "--out", folder)[0] == 0
    truth = run("report", folder, "--format", "json")
    (folder / "runs.csv").write_text("garbage\n")
    assert run("report", folder, "--format", "json") == truth  # runs.csv is written for the reader, never read
    assert run("ablate", "--resume", folder, "--jobs", "1")[0] == 0
    assert len(pd.read_csv(folder / "runs.csv")) == len(json.loads((folder / "meta.json").read_text())["variants"])


def test_existing_folders_are_not_overwritten_without_force(run, made, tmp_path):
    ckpt = made("ckpt", tmp_path / "ckpt")  # a copy of the session's tiny checkpoint (train errhelp.TINY)
    weights = (ckpt / "model.safetensors").read_bytes()
    assert_user_error(run("train", *TINY, "--out", ckpt), "already exists and holds files", "--force")
    assert (ckpt / "model.safetensors").read_bytes() == weights
    assert run("train", *TINY, "--seed", "1", "--out", ckpt, "--force")[0] == 0
    assert (ckpt / "model.safetensors").read_bytes() != weights
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("mine")
    assert_user_error(run("export", ckpt, "--hf", tmp_path / "hf"), "already exists and holds files", "--force")
    assert_user_error(run("export", ckpt, "--hf", ""), "--hf is empty")
    # a diverged run written over a checkpoint leaves no stale weights behind, and says it diverged
    assert run("train", *TINY, "--lr", "1e9", "--out", ckpt, "--force")[0] == 0
    assert_user_error(run("generate", ckpt), "holds a run that diverged", "no weights were saved")


def test_resume_refuses_another_out_and_another_commands_folder(run, made, tmp_path):
    folder = made("r", tmp_path / "r")  # a copy of the session's tiny ablation (errhelp.ABLATE)
    assert_user_error(run("ablate", "--resume", folder, "--out", tmp_path / "other"), "leave out --out")
    assert_user_error(run("duel", "--resume", folder), "was written by modern-gpt ablate")
    assert run("ablate", "--resume", folder, "--out", folder)[0] == 0  # the same folder is no contradiction
    assert_user_error(run(*ABLATE, "--out", folder), "already holds an ablation", f"--resume {folder}")


def test_a_half_created_folder_gets_the_same_advice_from_out_and_resume(run, tmp_path):
    folder = tmp_path / "half"
    (folder / "runs").mkdir(parents=True)
    assert_user_error(run(*ABLATE, "--out", folder), "left half-created", "delete it")
    assert_user_error(run("ablate", "--resume", folder), "left half-created", "delete it")
    assert_user_error(run("report", folder), "left half-created", "delete it")


def test_files_respect_the_umask(run, tmp_path):
    old = os.umask(0o022)
    try:
        ckpt = make_checkpoint(run, tmp_path / "ckpt")
        folder = tmp_path / "r"
        make_results(run, folder)
    finally:
        os.umask(old)
    files = [*ckpt.iterdir(), *folder.glob("*.*"), *(folder / "runs").iterdir()]
    assert len(files) > 8
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: "0o644" for f in files}


def test_meta_json_settings_and_plan_must_be_whole_and_agree(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    meta = json.loads((folder / "meta.json").read_text())
    runs = {f.name: f.read_bytes() for f in (folder / "runs").iterdir()}
    for section in ("train", "data", "model"):
        bad = json.loads(json.dumps(meta))
        bad["spec"]["settings"][section] = {}
        (folder / "meta.json").write_text(json.dumps(bad))
        for args in (["report", folder], ["ablate", "--resume", folder]):
            assert_user_error(run(*args), "meta.json", f"spec.settings.{section}.", "is missing")
    assert {f.name: f.read_bytes() for f in (folder / "runs").iterdir()} == runs  # no finished run redone
    for plan, what in (("duel", "spec.plan is duel, but its rows are"), ("power", "spec.plan is power")):
        (folder / "meta.json").write_text(json.dumps({**meta, "spec": {**meta["spec"], "plan": plan}}))
        assert_user_error(run("report", folder), "meta.json", what)


def test_meta_json_holds_its_format_and_a_later_format_is_refused_by_name(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == 1 and list(meta)[0] == "format"  # written first, by every new ablation
    for args in (["report", folder], ["ablate", "--resume", folder]):
        (folder / "meta.json").write_text(json.dumps({**meta, "format": 2}))
        assert_user_error(run(*args), "was written by a later modern-gpt (meta.json format 2; this one reads format 1)")
        (folder / "meta.json").write_text(json.dumps({**meta, "format": "1"}))
        assert_user_error(run(*args), "meta.json is damaged: its format is '1', not a whole number")
    del meta["format"]  # a folder written before the number: format 1's layout
    (folder / "meta.json").write_text(json.dumps(meta))
    code, out, err = run("report", folder)
    assert code == 0, err


def test_a_hand_edited_runs_csv_never_changes_a_table(run, tmp_path, made):
    """The table is built from runs/, the source of truth; runs.csv is written for the reader and never read."""
    folder = made("r", tmp_path / "r")
    truth = run("report", folder, "--format", "json")
    table = pd.read_csv(folder / "runs.csv")
    table["val_loss"] += 1.0  # as a runs.csv copied from another ablation of the same rows and seeds
    table.to_csv(folder / "runs.csv", index=False)
    assert run("report", folder, "--format", "json") == truth
    header, rest = (folder / "runs.csv").read_text().split("\n", 1)
    (folder / "runs.csv").write_text(header.replace("val_loss,", "val_loss,val_loss,", 1) + "\n" + rest)
    assert run("report", folder, "--format", "json") == truth
    (folder / "runs" / "row02-seed1.json").unlink()  # a run file deleted: the table follows runs/, not runs.csv
    code, out, err = run("report", folder, "--format", "json")
    assert code == 0 and json.loads(out)["rows"][2]["seeds"] == 1


def test_pipes_and_links_in_a_results_folder_never_block(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    os.mkfifo(folder / "runs" / "row09-seed0.json")
    code, out, err = run("report", folder)
    assert code == 0 and "runs/row09-seed0.json (it is a pipe (FIFO), not a file)" in out
    assert run("ablate", "--resume", folder)[0] == 0
    lock = folder / ".lock"
    for make, what in (
        (os.mkfifo, "is a pipe (FIFO), not a lock file"),
        (lambda p: p.symlink_to("/dev/zero"), "is a symbolic link to /dev/zero, not a lock file"),
        (lambda p: p.symlink_to(tmp_path / "gone"), f"is a symbolic link to {tmp_path / 'gone'}, which does not exist"),
    ):
        make(lock)
        for args in (["report", folder], ["ablate", "--resume", folder], [*ABLATE, "--out", folder]):
            assert_user_error(run(*args), f"{lock} {what}")
        lock.unlink()


def test_checkpoint_refusals_name_the_real_cause(run, tmp_path, made):
    from safetensors.torch import load_file, save_file

    ckpt = made("ckpt", tmp_path / "ckpt")
    for command in (["generate", ckpt], ["extrapolate", ckpt, "--contexts", "16"]):
        assert_user_error(run(*command, "--device", "bogus"), "unknown --device 'bogus'")
    for hf in (ckpt, ckpt / "hf", tmp_path):
        assert_user_error(run("export", ckpt, "--hf", hf, "--force"), "is the checkpoint's folder")
    assert_user_error(
        run("export", "/dev/null", "--hf", tmp_path / "x"), "/dev/null is not a checkpoint folder (it is not a folder)"
    )
    weights = load_file(ckpt / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, ckpt / "model.safetensors")
    assert_user_error(run("generate", ckpt, "--device", "cpu"), "holds weights that are not finite", name)


def test_power_says_how_to_resume_its_own_folder(run, tmp_path, made):
    folder = made("r", tmp_path / "r")
    meta = json.loads((folder / "meta.json").read_text())
    meta["spec"]["plan"] = "power"
    (folder / "meta.json").write_text(json.dumps(meta))
    assert_user_error(run("power", *TINY, "--seeds", "3", "--out", folder), f"modern-gpt power --resume {folder}")


def test_report_says_how_to_train_a_failed_run_again(run, tmp_path, made):
    """Issue 31: a run recorded as failed (killed, out of memory) is kept by every resume, and nothing said how to
    retry it. The report names its file and the resume; deleting it and resuming trains it again."""
    folder = made("r", tmp_path / "r")
    victim = folder / "runs" / "row02-seed1.json"
    record = json.loads(victim.read_text())
    good = record["val_loss"]
    victim.write_text(json.dumps({**record, "error": "killed by signal 9", "val_loss": None, "train_loss": None}))
    code, out, _ = run("report", folder)
    out = " ".join(out.split())  # the footnote wraps at the console's width
    assert code == 0 and "To train the 1 failed run again" in out and "runs/row02-seed1.json" in out
    assert f"modern-gpt ablate --resume {folder}" in out
    victim.unlink()
    code, out, err = run("ablate", "--resume", folder)
    assert code == 0, err
    again = json.loads(victim.read_text())
    assert again["error"] == "" and again["val_loss"] == good  # trained again, bit for bit
    assert "failed run" not in run("report", folder)[1]


def test_report_reads_a_folder_whose_plugin_file_is_gone_and_resume_still_refuses(run, tmp_path, monkeypatch):
    """report needs no model: a folder made with a plugin whose file has since gone prints its table from the
    runs, with a footnote naming the file; resume, which trains, still refuses in one sentence."""
    from tests.model.test_plugins import EXAMPLES, isolated_registry

    isolated_registry(monkeypatch)
    plugin = tmp_path / "mine.py"
    plugin.write_text((EXAMPLES / "relu2.py").read_text())
    folder = tmp_path / "res"
    variants = ["--plan", "custom", "--variants", "modern;modern+relu2", "--no-placebo"]
    code, _, err = run("ablate", *TINY, "--jobs", "1", "--seeds", "2", *variants, "--plugin", plugin, "--out", folder)
    assert code == 0, err
    isolated_registry(monkeypatch)  # a later command, in a process that never loaded it
    plugin.unlink()
    code, out, err = run("report", folder, "--format", "markdown")
    assert code == 0, err
    assert "| modern+relu2 |" in out and f"Missing plugin: {plugin} (relu2)" in out and "Traceback" not in err
    isolated_registry(monkeypatch)
    assert_user_error(run("ablate", "--resume", folder), f"made with the plugin {plugin} (relu2), which is missing")


def test_a_name_longer_than_the_file_system_allows_is_one_sentence(run, tmp_path):
    """Issue 43, class 4: a name over 255 bytes gave OSError [Errno 36] from the first stat, for every output
    flag; reading such a path did too."""
    long = "é" * 130  # 260 bytes in UTF-8, 130 characters: the limit is in bytes
    for args in (
        (*ABLATE, "--out", long),
        ("scale", "--smoke", "--seeds", "1", "--out", f"deep/{long}"),
        ("train", *TINY, "--out", long),
    ):
        assert_user_error(run(*args), "--out: the name éééé", "is 260 bytes", "choose a shorter --out")
    folder = tmp_path / "r"
    make_results(run, folder)
    for flag in ("--html", "--markdown"):
        assert_user_error(run("report", folder, flag, f"{long}.page"), f"choose a shorter {flag}")
    assert_user_error(run("report", long), "longer than the file system allows")
    assert_user_error(run("judge", f"{long}.csv"), "longer than the file system allows")
    assert not any(p.name.startswith("é") for p in tmp_path.rglob("*"))  # nothing was created
