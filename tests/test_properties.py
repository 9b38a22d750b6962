"""Property-based: whatever text and flags a user gives, the outcome is a finished run or exit code 2
with one sentence; never a traceback, never a hang."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modern_gpt.model import COMPONENTS, GPT, ConfigError, ModelConfig

from .clihelp import run_main

FLAG_VALUES = {
    "--dim": [-1, 0, 1, 6, 8, 16, 30],
    "--heads": [0, 1, 2, 3, 4, 8],
    "--kv-heads": [0, 1, 2, 3],
    "--layers": [0, 1, 2],
    "--context": [0, 1, 2, 8, 16, 5000],
    "--steps": [-1, 0, 1, 2],
    "--batch-size": [0, 1, 3],
    "--lr": [-1.0, 0.0, 1e-3, 1e9, math.nan, math.inf],
    "--dropout": [-0.1, 0.0, 0.5, 1.0],
    "--tokenizer": ["char", "byte", "bpe", "words"],
    "--vocab-size": [10, 260, 300],
    "--val-fraction": [0.0, 0.1, 0.5, 1.0],
    "--eval-every": [0, 1, 5],
    "--eval-batches": [0, 1],
    "--warmup-steps": [-1, 0, 2],
    "--multiple-of": [0, 1, 8],
    "--mlp-hidden": [0, 1, 5],
    "--rope-base": [0.5, 10000.0, math.inf],
    "--grad-clip": [-1.0, 0.0, 1.0, math.nan],
    "--weight-decay": [-0.1, 0.0, math.nan],
}
SWITCHES = ["--" + c.replace("_", "-") for c in COMPONENTS] + ["--modern"]

flags = st.lists(
    st.sampled_from(sorted(FLAG_VALUES)).flatmap(lambda f: st.tuples(st.just(f), st.sampled_from(FLAG_VALUES[f]))),
    max_size=5,
    unique_by=lambda fv: fv[0],
)
switches = st.lists(st.sampled_from(SWITCHES), unique=True, max_size=3)
corpora = st.one_of(st.binary(max_size=400), st.text(max_size=400).map(lambda t: t.encode("utf-8")))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=corpora, flag_values=flags, on=switches)
def test_any_text_and_flags_end_in_a_run_or_one_sentence(capsys, monkeypatch, tmp_path_factory, data, flag_values, on):
    folder = tmp_path_factory.mktemp("prop")
    path = folder / "corpus.txt"
    path.write_bytes(data)
    args = ["train", "--data", path, "--steps", "2", "--context", "8", "--dim", "8", "--heads", "2", "--layers", "1",
            "--eval-every", "1", "--eval-batches", "1", "--batch-size", "2", "--cache-dir", folder / "cache",
            "--out", folder / "ckpt"]  # fmt: skip
    for flag, value in flag_values:
        args += [flag, value]  # later flags override the defaults above
    args += on
    code, out, err = run_main(capsys, monkeypatch, *args)
    assert "Traceback" not in out + err
    if code == 0:
        assert "checkpoint:" in out or "diverged" in out or "failed" in out
    else:
        assert code == 2, (code, args, err)
        assert err.strip(), args  # a message, never silence


@settings(max_examples=60, deadline=None)
@given(
    dim=st.integers(-2, 40),
    heads=st.integers(-1, 9),
    kv_heads=st.one_of(st.none(), st.integers(-1, 9)),
    layers=st.integers(0, 2),
    context=st.integers(0, 12),
    mlp_hidden=st.one_of(st.none(), st.integers(-1, 20)),
    components=st.lists(st.sampled_from(COMPONENTS), unique=True),
)
def test_the_model_builds_and_runs_or_refuses_in_one_sentence(
    dim, heads, kv_heads, layers, context, mlp_hidden, components
):
    kw = dict(
        vocab_size=11, dim=dim, heads=heads, kv_heads=kv_heads, layers=layers, context=context, mlp_hidden=mlp_hidden
    )
    try:
        cfg = ModelConfig(**kw).with_components(components)
    except ConfigError as e:
        assert str(e).endswith(".") and "\n" not in str(e)
        return
    model = GPT(cfg)
    x = torch.randint(0, 11, (2, cfg.context))
    logits, loss = model(x, x)
    assert logits.shape == (2, cfg.context, 11) and torch.isfinite(loss)


@pytest.mark.parametrize("seed", range(3))
def test_random_unicode_round_trips_through_every_tokenizer(seed):
    import random

    from modern_gpt.data import train_tokenizer

    rng = random.Random(seed)
    text = "".join(
        chr(rng.choice([rng.randint(32, 126), rng.randint(160, 0x2FFF), rng.randint(0x1F300, 0x1F6FF)]))
        for _ in range(500)
    )
    for kind in ("char", "byte", "bpe"):
        tok = train_tokenizer(kind, text, 300)
        assert tok.decode(tok.encode(text)) == text
