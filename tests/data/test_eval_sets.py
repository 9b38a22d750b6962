"""--eval-data sets and the further metrics of a run: bits per byte, in-context gain, the loss at 2x the context.

The metrics are checked against what they must equal on cases worked by hand, the sets against each bad input
(one sentence, exit 2, before training; or a footnote), and a tiny ablation with the two shipped sets for its
columns, their determinism and the learned position table's wall.
"""

import json
import math
import pickle
import shutil
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from modern_gpt.core.config import DataConfig, ModelConfig, TrainConfig
from modern_gpt.core.errors import UserError
from modern_gpt.core.settings import ALL, check_value, read_toml, resolve
from modern_gpt.data.corpus import load_corpus
from modern_gpt.data.tokenizing import BPETokenizer, ByteTokenizer, CharTokenizer, token_bytes
from modern_gpt.run import evaluation
from modern_gpt.run.train import EvalWindows, train_run
from tests.clihelp import CLASSIC_ROPE, tiny, user_error
from tests.errhelp import assert_user_error

SETS = Path(str(resources.files("modern_gpt").joinpath("evalsets")))
CODE, PROSE = SETS / "code.txt", SETS / "prose.txt"
MODEL = ModelConfig(context=16, dim=32, heads=2, layers=1)
TRAIN = TrainConfig(steps=6, batch_size=4, lr=3e-3, warmup_steps=2, eval_every=6, eval_batches=2, threads=1)


# --- the metrics, on cases worked by hand ---------------------------------------------------------------------
def test_bits_per_byte_is_nats_over_bytes_and_leaves_out_tokens_of_no_bytes():
    losses = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    ids = np.array([[0, 1, 2]])
    lengths = np.array([1, 2, 0])  # id 2: a special token, left out of both sums
    assert evaluation.bits_per_byte(losses, ids, lengths) == pytest.approx((1.0 + 2.0) / (3 * math.log(2)))
    assert math.isnan(evaluation.bits_per_byte(losses, ids, None))  # token ids with no tokenizer: no bytes


def test_token_bytes_add_up_to_the_text_s_utf8_bytes_for_every_lossless_tokenizer():
    text = "Größe: naïve café, 東京 and plain ASCII.\n" * 20
    bpe = BPETokenizer.train(text, 300)
    for tok in (CharTokenizer.train(text), ByteTokenizer(), bpe):
        ids = tok.encode(text)
        assert int(token_bytes(tok)[ids].sum()) == len(text.encode("utf-8")), tok.kind
    assert token_bytes(CharTokenizer.train("ab"))[0] == 3  # an unknown character decodes as U+FFFD


def test_icl_gain_is_the_late_band_minus_the_early_band():
    assert evaluation.icl_bands(64) == (slice(4, 8), slice(60, 64))
    assert evaluation.icl_bands(512) == (slice(32, 64), slice(480, 512))  # Olsson et al.'s 50 and 500 lie inside
    assert evaluation.icl_bands(15) is None
    losses = np.full((3, 64), 2.0, dtype=np.float32)
    losses[:, 4:8], losses[:, 60:] = 3.0, 1.5
    assert evaluation.icl_gain(losses) == pytest.approx(-1.5)
    assert math.isnan(evaluation.icl_gain(np.ones((3, 8), dtype=np.float32)))


def test_metric_names_are_the_probes_then_each_set_s_loss_and_bpb():
    assert evaluation.metric_names(["code", "prose"]) == [
        "val_bpb",
        "ctx2x_loss",
        "icl_gain",
        "code_loss",
        "code_bpb",
        "prose_loss",
        "prose_bpb",
    ]


# --- one run ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def with_sets(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("cache"))
    return load_corpus(DataConfig(cache_dir=cache, eval_data=(f"code={CODE}", f"prose={PROSE}")))


def test_a_run_gives_every_metric_and_val_bpb_is_val_bpc_for_ascii_characters(with_sets):
    classic, _ = train_run(MODEL, with_sets, TRAIN, seed=0)
    rope, _ = train_run(MODEL.with_components(("rope",)), with_sets, TRAIN, seed=0)
    names = evaluation.metric_names(["code", "prose"])
    for r in (classic, rope):
        assert list(r.metrics) == names
        assert all(math.isfinite(r.metrics[n]) for n in names if n != "ctx2x_loss")
        assert r.metrics["val_bpb"] == pytest.approx(r.val_bpc, rel=1e-12)  # the smoke text is ASCII: a byte a char
    assert math.isnan(classic.metrics["ctx2x_loss"]) and classic.metric_notes["ctx2x_loss"].startswith("wall:")
    assert math.isfinite(rope.metrics["ctx2x_loss"]) and "ctx2x_loss" not in rope.metric_notes
    # the code set holds characters the smoke corpus never shows: flagged, as bits/char is
    assert "code_bpb" in rope.metric_notes and "prose_bpb" not in rope.metric_notes
    again, _ = train_run(MODEL.with_components(("rope",)), with_sets, TRAIN, seed=0)
    assert again.metrics == rope.metrics


def test_a_corpus_with_sets_pickles_by_path_and_back_to_the_same_tokens(with_sets):
    raw = pickle.dumps(with_sets)
    assert len(raw) < 20_000  # the sets' paths, not their tokens (each holds thousands)
    back = pickle.loads(raw)
    for a, b in zip(with_sets.evals, back.evals, strict=True):
        assert a.name == b.name and np.array_equal(a.ids[:], b.ids[:])


def test_a_corpus_sent_to_another_machine_carries_the_sets_tokens_not_this_machine_s_paths(tmp_path):
    """What Ray and Slurm send (Corpus.in_memory) holds every token, sets included: a node without this machine's
    token cache trains and measures as here. Negative control: the sets left as spans point into the cache."""
    cache = tmp_path / "cache"
    corpus = load_corpus(DataConfig(cache_dir=str(cache), eval_data=(f"code={CODE}", f"prose={PROSE}")))
    rope = MODEL.with_components(("rope",))
    here, _ = train_run(rope, corpus, TRAIN, seed=0)
    sent = pickle.dumps(corpus.in_memory())
    spans_only = pickle.dumps(replace(corpus, train=np.asarray(corpus.train), val=np.asarray(corpus.val)))
    shutil.rmtree(cache)  # the other machine has no such folder
    there, _ = train_run(rope, pickle.loads(sent), TRAIN, seed=0)
    assert there.metrics == here.metrics and there.val_loss == here.val_loss
    with pytest.raises(FileNotFoundError):
        train_run(rope, pickle.loads(spans_only), TRAIN, seed=0)


def test_a_set_is_tokenized_with_the_corpus_s_tokenizer(with_sets):
    code = with_sets.evals[0]
    text = CODE.read_text()
    assert np.array_equal(code.ids[:], with_sets.tokenizer.encode(text))
    assert code.chars == len(text) and code.lost > 0


# --- settings ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "given, message",
    [
        (("code",), "must be NAME=PATH"),
        (("=x.txt",), "must be NAME=PATH"),
        (("1st=x.txt",), "must be a letter"),
        (("a b=x.txt",), "must be a letter"),
        (("val=x.txt",), "taken by a column"),
        (("ctx2x=x.txt",), "taken by a column"),
        (("code=a.txt", "Code=b.txt"), "two sets 'Code'"),
    ],
)
def test_bad_eval_data_is_one_sentence(given, message):
    with pytest.raises(UserError, match=message):
        DataConfig(eval_data=given)


def test_the_toml_forms_a_table_or_a_list_are_relative_to_the_file(tmp_path):
    (tmp_path / "table.toml").write_text('[data.eval_data]\ncode = "sets/code.txt"\nprose = "/abs/prose.txt"\n')
    (tmp_path / "list.toml").write_text('[data]\neval_data = ["code=sets/code.txt"]\n')
    table = read_toml(tmp_path / "table.toml")["data.eval_data"]
    assert table == (f"code={tmp_path / 'sets/code.txt'}", "prose=/abs/prose.txt")
    assert read_toml(tmp_path / "list.toml")["data.eval_data"] == (f"code={tmp_path / 'sets/code.txt'}",)
    settings = resolve(str(tmp_path / "table.toml"), False, {})
    assert settings.data.eval_sets[0] == ("code", str(tmp_path / "sets/code.txt"))
    assert settings.to_dict()["data"]["eval_data"] == list(settings.data.eval_data)
    assert "eval_data" not in resolve(None, True, {}).to_dict()["data"]  # unset: hashed as before the flag
    assert check_value(ALL["data.eval_data"], {"code": "c.txt"}, "api") == ("code=c.txt",)  # a Python dict too


# --- bad input on the command line: one sentence, exit 2, before training ---------------------------------------
ABLATE = ["ablate", *tiny(steps=2), "--jobs", "1", "--seeds", "2", "--plan", "custom", "--variants", "classic;rope"]


def test_a_set_shorter_than_one_window_is_refused(run, tmp_path):
    (tmp_path / "short.txt").write_text("To be.\n")
    err = user_error(run, *ABLATE, "--eval-data", f"short={tmp_path / 'short.txt'}")
    assert "evaluation set short" in err and "fewer than one window of --context 16" in err
    assert not (tmp_path / "results").exists()


def test_two_sets_of_one_name_are_refused(run):
    assert_user_error(run(*ABLATE, "--eval-data", f"a={CODE}", "--eval-data", f"a={PROSE}"), "two sets 'a'")


def test_a_set_identical_to_the_training_data_is_refused_wherever_it_lies(run, tmp_path):
    smoke = Path(str(resources.files("modern_gpt").joinpath("smoke.txt")))
    shutil.copy(smoke, tmp_path / "copy.txt")
    err = user_error(run, *ABLATE, "--eval-data", f"same={tmp_path / 'copy.txt'}")
    assert "same as the corpus's own data" in err
    # a copy of a file of a folder corpus too
    (tmp_path / "corpus").mkdir()
    shutil.copy(PROSE, tmp_path / "corpus" / "a.txt")
    shutil.copy(CODE, tmp_path / "corpus" / "b.txt")
    err = user_error(run, *ABLATE, "--data", tmp_path / "corpus", "--eval-data", f"p={PROSE}")
    assert "same as the corpus's own data" in err


def test_a_missing_set_is_one_sentence(run, tmp_path):
    assert_user_error(
        run(*ABLATE, "--eval-data", f"gone={tmp_path / 'gone.txt'}"), "--eval-data gone: ", "does not exist"
    )


def test_an_empty_or_unreadable_set_is_named(run, tmp_path):
    """An empty file said "X is empty; give a corpus", and a CSV without a text column named --text-field, with no
    word of which --eval-data set was meant."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    assert_user_error(run(*ABLATE, "--eval-data", f"e={tmp_path / 'empty.txt'}"), "--eval-data e: ", "is empty")
    assert_user_error(run(*ABLATE, "--eval-data", f"t={tmp_path / 'table.csv'}"), "--eval-data t: ", "no column")


# --- the ablation: columns, determinism, the wall, the lossy footnote -------------------------------------------
@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    from tests.clihelp import main_ok

    base = tmp_path_factory.mktemp("evalsets")
    args = ["ablate", *tiny(steps=4), "--jobs", "1", *CLASSIC_ROPE]
    args += ["--eval-data", f"code={CODE}", "--eval-data", f"prose={PROSE}"]
    for name in ("a", "b"):
        main_ok(*args, "--out", str(base / name))
    return base


COLUMNS = ["val_bpb", "ctx2x_loss", "icl_gain", "code_loss", "code_bpb", "prose_loss", "prose_bpb"]


def test_runs_csv_holds_every_metric_finite_and_the_same_on_a_rerun(two_sets):
    a, b = (pd.read_csv(two_sets / n / "runs.csv") for n in ("a", "b"))
    assert set(COLUMNS) <= set(a.columns)
    assert list(a.columns).index("val_bpb") == list(a.columns).index("val_ppl") + 1
    rope = a["variant"] == "rope"
    assert np.isfinite(a.loc[:, [c for c in COLUMNS if c != "ctx2x_loss"]].to_numpy()).all()
    assert np.isfinite(a.loc[rope, "ctx2x_loss"]).all() and a.loc[~rope, "ctx2x_loss"].isna().all()
    pd.testing.assert_frame_equal(a[["variant", "seed", *COLUMNS]], b[["variant", "seed", *COLUMNS]])


def test_the_run_files_say_why_ctx2x_is_missing_and_meta_keeps_the_sets(two_sets):
    runs = [json.loads(p.read_text()) for p in sorted((two_sets / "a" / "runs").glob("*.json"))]
    walls = [r["metric_notes"].get("ctx2x_loss", "") for r in runs if r["variant"] != "rope"]
    assert walls and all(w.startswith("wall: the learned position table has 16 rows") for w in walls)
    meta = json.loads((two_sets / "a" / "meta.json").read_text())
    sets = meta["corpus"]["eval_sets"]
    assert list(sets) == ["code", "prose"] and sets["code"]["lost_chars"] > 0 == sets["prose"]["lost_chars"]


def test_report_footnotes_the_lossy_set(two_sets, run_ok):
    out = " ".join(run_ok("report", str(two_sets / "a")).split())
    assert "Lossy evaluation set" in out and "characters of code" in out and "of prose" not in out


def test_an_old_folder_without_metrics_still_reads(two_sets, tmp_path, run_ok):
    old = tmp_path / "old"
    shutil.copytree(two_sets / "a", old)
    for p in (old / "runs").glob("*.json"):
        record = json.loads(p.read_text())
        record.pop("metrics"), record.pop("metric_notes")
        p.write_text(json.dumps(record))
    run_ok("report", str(old))
    from modern_gpt.ablation.results import ResultsDir

    frame = ResultsDir(old).scan().runs()
    assert "val_bpb" not in frame.columns and frame["val_loss"].notna().all()


def test_resume_refuses_a_set_that_changed(two_sets, tmp_path, run):
    folder, sets = tmp_path / "r", tmp_path / "sets"
    sets.mkdir()
    shutil.copy(PROSE, sets / "prose.txt")
    args = ["ablate", *tiny(steps=2), "--jobs", "1", *CLASSIC_ROPE, "--eval-data", f"prose={sets / 'prose.txt'}"]
    assert run(*args, "--out", folder)[0] == 0
    (sets / "prose.txt").write_text(PROSE.read_text() + "\nOne more line.\n")
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "status": "interrupted"}))
    assert_user_error(run("ablate", "--resume", folder), "the evaluation set prose", "changed since")


def test_a_failed_run_has_nan_metrics(two_sets):
    from modern_gpt.ablation.results import Scan

    records = {(0, 0): {"row": 0, "seed": 0, "val_loss": 2.0, "metrics": {"val_bpb": 3.0, "icl_gain": "x"}},
               (1, 0): {"row": 1, "seed": 0, "val_loss": math.nan, "metrics": {}}}  # fmt: skip
    frame = Scan(records).runs_frame()
    assert frame.loc[0, "val_bpb"] == 3.0 and math.isnan(frame.loc[0, "icl_gain"])  # a hand-edited string: NaN
    assert frame.loc[[1], ["val_bpb", "icl_gain"]].isna().all(axis=None)


def test_replace_keeps_the_sets_on_the_config():
    cfg = DataConfig(eval_data=["code=a.txt"])
    assert cfg.eval_data == ("code=a.txt",) and replace(cfg, val_fraction=0.2).eval_sets == [("code", "a.txt")]


# --- token files ------------------------------------------------------------------------------------------------
def _ids(n: int, top: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, top, n).astype(np.uint16)


def test_token_file_sets_go_with_a_token_file_corpus_and_are_checked(tmp_path):
    _ids(6_000, 200, 0).tofile(tmp_path / "train.bin")
    _ids(900, 200, 1).tofile(tmp_path / "other.bin")
    _ids(900, 300, 2).tofile(tmp_path / "wide.bin")
    shutil.copy(tmp_path / "train.bin", tmp_path / "copy.bin")
    (tmp_path / "text.txt").write_text("some text\n" * 50)
    base = DataConfig(path=str(tmp_path / "train.bin"), cache_dir=str(tmp_path / "cache"), vocab_size=256)
    corpus = load_corpus(replace(base, eval_data=(f"other={tmp_path / 'other.bin'}",)))
    other = corpus.evals[0]
    assert np.array_equal(other.ids[:], _ids(900, 200, 1)) and other.chars == 900  # no tokenizer file: tokens
    run, _ = train_run(MODEL, corpus, TRAIN, seed=0)
    assert math.isfinite(run.metrics["other_loss"]) and math.isnan(run.metrics["other_bpb"])  # no bytes known
    for given, message in [
        (f"w={tmp_path / 'wide.bin'}", "at or past the corpus's vocabulary of 256 ids"),
        (f"c={tmp_path / 'copy.bin'}", "same as the corpus's own data"),
        (f"t={tmp_path / 'text.txt'}", "no tokenizer file to read it with"),
    ]:
        with pytest.raises(UserError, match=message):
            load_corpus(replace(base, eval_data=(given,)))
    with pytest.raises(UserError, match="whose ids no file can hold"):  # token ids beside a char tokenizer
        load_corpus(DataConfig(cache_dir=str(tmp_path / "cache"), eval_data=(f"o={tmp_path / 'other.bin'}",)))


def test_every_variant_and_seed_is_measured_on_the_same_set_tokens(with_sets, monkeypatch):
    from modern_gpt.model import gpt as model_module

    seen, forward = [], model_module.GPT.forward

    def recording(self, idx, targets=None, cache=None):
        if not self.training:
            seen.append(idx.clone())
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", recording)
    inputs = []
    for components, seed in [((), 0), (("rope", "swiglu"), 1)]:
        seen.clear()
        train_run(MODEL.with_components(components), with_sets, TRAIN, seed=seed)
        inputs.append([x for x in seen if x.shape[1] == MODEL.context])  # the 2x windows: RoPE's alone
    a, b = inputs
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    w = EvalWindows.of(with_sets, MODEL.context, TRAIN)  # one curve point, then the final pass with the sets'
    expected = len(w.train) + len(w.val) + len(w.val_final) + len(w.train_final) + sum(len(o) for o in w.sets)
    assert sum(len(x) for x in a) == expected and all(len(o) for o in w.sets)


def test_ctx2x_on_a_validation_split_shorter_than_one_long_window_is_nan_with_a_note(tmp_path):
    (tmp_path / "val.txt").write_text("To be, or not to be: that is\n")  # 29 characters: one window of 16, not of 32
    corpus = load_corpus(DataConfig(cache_dir=str(tmp_path / "cache"), val_data=str(tmp_path / "val.txt")))
    run, _ = train_run(MODEL.with_components(("rope",)), corpus, TRAIN, seed=0)
    assert math.isnan(run.metrics["ctx2x_loss"]) and run.metric_notes["ctx2x_loss"].startswith("short:")
    assert math.isfinite(run.val_loss)


def test_the_sets_change_no_bit_of_val_and_train_loss(with_sets, corpus):
    model = MODEL.with_components(("rope",))
    alone, _ = train_run(model, corpus, TRAIN, seed=4)
    both, _ = train_run(model, with_sets, TRAIN, seed=4)
    assert (alone.val_loss, alone.train_loss, alone.curve) == (both.val_loss, both.train_loss, both.curve)
    assert {k: both.metrics[k] for k in evaluation.PROBES} == alone.metrics


METRICS = ["val_loss", "code_loss", "prose_loss", "ctx2x_loss", "icl_gain"]


def test_report_judges_every_metric_as_one_family_and_judge_agrees(two_sets, run_ok):
    """Issue 46: with --eval-data sets the folder's table judges val, each set's loss and both probes as one
    family (verdict/metrics.py); the verdict table's val verdicts are the family's, metrics.csv holds the long
    form, and judge on the folder's runs.csv with the same --metric columns gives the same verdicts."""
    folder = two_sets / "a"
    doc = json.loads(run_ok("report", str(folder), "--format", "json"))
    assert doc["metrics"]["names"] == METRICS
    family = pd.DataFrame(doc["metrics"]["rows"])
    val = family[family.metric == "val_loss"].set_index("variant")
    for row in doc["rows"][1:]:  # the first row is the reference
        assert row["verdict"] == val.loc[row["variant"], "verdict"]
        assert row["p_adj"] == pytest.approx(val.loc[row["variant"], "p_adj"], rel=1e-12)
    written = pd.read_csv(folder / "metrics.csv")
    assert list(written.metric) == list(family.metric) and list(written.verdict.fillna("")) == list(family.verdict)
    # rope against classic past the context: classic has no value there (its wall), so the cell is not tested
    rope = family[(family.variant == "rope") & (family.metric == "ctx2x_loss")].iloc[0]
    assert rope["verdict"] == "not tested" and math.isnan(rope["p_adj"])
    flags = [a for m in METRICS for a in ("--metric", m)]
    judged = json.loads(run_ok("judge", str(folder / "runs.csv"), *flags, "--format", "json"))
    again = pd.DataFrame(judged["rows"])
    assert list(again.verdict) == list(family.verdict) and list(again.metric) == list(family.metric)
    assert np.allclose(again.p_adj.astype(float), family.p_adj.astype(float), equal_nan=True, rtol=1e-12)
    table = " ".join(run_ok("report", str(folder)).split())
    assert all(f"{m}, metric {k + 2} of 5" in table for k, m in enumerate(METRICS[1:]))
    assert "Several metrics, one family" in table and "Hommel-adjusted across" not in table  # one rule stated


def test_a_folder_without_sets_judges_val_alone_as_before(tmp_path, run_ok):
    """The probes are in runs.csv for every run, but without --eval-data the table is today's: val alone."""
    folder = tmp_path / "plain"
    run_ok(*ABLATE, "--out", str(folder))
    doc = json.loads(run_ok("report", str(folder), "--format", "json"))
    assert "metrics" not in doc and not (folder / "metrics.csv").exists()
    assert {"ctx2x_loss", "icl_gain"} <= set(pd.read_csv(folder / "runs.csv").columns)


def test_a_duel_with_sets_reports_bits_per_byte_on_every_set(tmp_path, run_ok):
    """Issue 46: the duel gives each side's mean bits per byte on val and each set, and the relative change per
    set (from the means over the seeds both sides finished), in the table, the sentence and the json."""
    folder = tmp_path / "duel"
    sets = ["--eval-data", f"code={CODE}", "--eval-data", f"prose={PROSE}"]
    out = " ".join(run_ok("duel", *tiny(steps=4), "--jobs", "1", "--seeds", "2", *sets, "--out", folder).split())
    runs = pd.read_csv(folder / "runs.csv")
    runs = runs[runs["variant"].isin(["classic", "modern"])]
    doc = json.loads(run_ok("report", str(folder), "--format", "json"))["duel"]["bpb"]
    assert list(doc["change"]) == ["val", "code", "prose"]
    for name in ("val", "code", "prose"):
        means = runs.groupby("variant")[f"{name}_bpb"].mean()
        assert doc["sides"]["classic"][name] == pytest.approx(means["classic"], rel=1e-12)
        assert doc["sides"]["modern"][name] == pytest.approx(means["modern"], rel=1e-12)
        change = means["modern"] / means["classic"] - 1
        assert doc["change"][name] == pytest.approx(change, rel=1e-12)
        assert f"{name} bits/byte {means['classic']:.4f} {means['modern']:.4f}" in out
        assert f"{name} {100 * change:+.1f}%" in out.split("bits per byte")[1]
    markdown = run_ok("report", str(folder), "--format", "markdown")
    assert "; bits per byte val " in markdown


def test_a_duel_without_sets_has_no_bits_per_byte(tmp_path, run_ok):
    folder = tmp_path / "plain"
    out = run_ok("duel", *tiny(steps=2), "--jobs", "1", "--seeds", "2", "--out", folder)
    assert "bits/byte" not in out and "bits per byte" not in out
    assert "bpb" not in json.loads(run_ok("report", str(folder), "--format", "json"))["duel"]


def test_the_share_page_shows_a_table_per_further_metric(two_sets, run_ok, tmp_path):
    """Issue 46: a folder judged over several metrics shares them all: after the verdict table, each further
    metric's table with the terminal's columns and cells."""
    page = tmp_path / "RESULT.md"
    run_ok("report", str(two_sets / "a"), "--markdown", str(page))
    text = page.read_text()
    for m in METRICS[1:]:
        assert f"| variant | vs | {m} | Δ {m} ± 95% CI | p_adj | verdict | mde | pairs |" in text, m
    assert "not tested" in text  # rope's ctx2x_loss against classic's wall
