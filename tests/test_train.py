"""One training run: reproducible, paired across variants, and honest about divergence."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import modern_gpt.model as model_module
from modern_gpt.data import DataConfig, eval_offsets, load_corpus
from modern_gpt.model import COMPONENTS, GPT, ModelConfig
from modern_gpt.train import STREAMS, TrainConfig, evaluate, lr_at, make_optimizer, stream_seed, train_run

MODEL = ModelConfig(context=16, dim=32, heads=2, layers=2)
TRAIN = TrainConfig(steps=12, batch_size=4, lr=3e-3, warmup_steps=3, eval_every=4, eval_batches=2, threads=1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.mktemp("cache"))))


def test_the_same_seed_twice_is_bitwise_identical(corpus):
    a, _ = train_run(MODEL, corpus, TRAIN, seed=5)
    b, _ = train_run(MODEL, corpus, TRAIN, seed=5)
    c, _ = train_run(MODEL, corpus, TRAIN, seed=6)
    assert a.curve == b.curve and a.val_loss == b.val_loss and a.train_loss == b.train_loss
    assert a.val_loss != c.val_loss and a.curve != c.curve


def test_variants_with_the_same_seed_see_the_same_batches_and_windows(corpus, monkeypatch):
    seen = []
    forward = GPT.forward

    def recording_forward(self, idx, targets=None, cache=None):
        seen.append((self.training, idx.clone()))
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", recording_forward)
    runs = {}
    for components in [(), COMPONENTS, ("rope", "swiglu")]:
        seen.clear()
        train_run(MODEL.with_components(components), corpus, TRAIN, seed=2)
        runs[components] = list(seen)
    first, *others = runs.values()
    n_train = sum(1 for training, _ in first if training)
    assert n_train == TRAIN.steps
    for other in others:
        assert len(other) == len(first)
        for (mode_a, x_a), (mode_b, x_b) in zip(first, other, strict=True):
            assert mode_a == mode_b and torch.equal(x_a, x_b)
    seen.clear()
    train_run(MODEL, corpus, TRAIN, seed=3)
    assert not torch.equal(seen[0][1], first[0][1])  # another seed, other batches
    # ... but the very same evaluation tokens: every seed is measured on the same windows
    evals_2 = [x for training, x in first if not training]
    evals_3 = [x for training, x in seen if not training]
    assert len(evals_2) == len(evals_3) > 3 * 2  # 3 evaluations of 2 splits, then the final full sets
    assert all(torch.equal(a, b) for a, b in zip(evals_2, evals_3, strict=True))


def test_two_seeds_and_the_placebo_are_measured_on_identical_val_tokens(corpus):
    """The final val loss of every run averages the same tokens: a function of the data, not of the seed."""
    offsets = eval_offsets(len(corpus.val), MODEL.context, TRAIN.eval_tokens)
    results = [train_run(MODEL, corpus, TRAIN, seed=s, init=i) for s, i in ((0, "init"), (1, "init"), (0, "placebo"))]
    for result, model in results:
        assert result.val_tokens == len(offsets) * MODEL.context
        assert result.val_loss == evaluate(model, corpus.val, offsets, MODEL.context, "cpu")  # recomputed: equal
    assert len({r.val_loss for r, _ in results}) == 3  # different models, same tokens


def test_the_placebo_changes_the_init_stream_only(corpus, monkeypatch):
    seen = []
    forward = GPT.forward

    def recording_forward(self, idx, targets=None, cache=None):
        seen.append(idx.clone())
        return forward(self, idx, targets, cache)

    monkeypatch.setattr(model_module.GPT, "forward", recording_forward)
    a, model_a = train_run(MODEL, corpus, TRAIN, seed=4)
    inputs_a = list(seen)
    seen.clear()
    b, model_b = train_run(MODEL, corpus, TRAIN, seed=4, init="placebo")
    # the same batches in the same order and the same evaluation windows, from other initial weights
    assert len(seen) == len(inputs_a) and all(torch.equal(x, y) for x, y in zip(seen, inputs_a, strict=True))
    assert a.val_loss != b.val_loss and a.val_tokens == b.val_tokens
    first_a, first_b = next(iter(model_a.parameters())), next(iter(model_b.parameters()))
    assert not torch.equal(first_a, first_b)


def test_a_small_eval_budget_takes_evenly_spaced_windows_of_the_data_alone():
    offsets = eval_offsets(100_001, 100, 10_000)
    assert len(offsets) == 100 and offsets[0] == 0 and offsets[-1] == 99_900  # spans the split: the last window ends at token 100,000
    assert np.all(np.diff(offsets) >= 100)  # whole windows, none overlapping
    whole = eval_offsets(1_000, 100, 10_000)
    assert list(whole) == [i * 100 for i in range(9)]  # all of a short split: 9 windows need 901 tokens


def test_a_run_records_what_a_researcher_needs(corpus):
    result, _ = train_run(MODEL, corpus, TRAIN, seed=0)
    assert result.steps_done == 12 and result.tokens_seen == 12 * 4 * 16
    assert result.epochs == pytest.approx(result.tokens_seen / len(corpus.train))
    assert [c["step"] for c in result.curve] == [4, 8, 12]
    assert result.val_tokens == len(eval_offsets(len(corpus.val), 16, TRAIN.eval_tokens)) * 16
    assert result.best_val_loss == min(c["val_loss"] for c in result.curve)
    assert result.val_bpc == pytest.approx(result.val_loss * len(corpus.val) / corpus.val_chars / math.log(2))
    assert result.val_ppl == pytest.approx(math.exp(result.val_loss))
    assert result.threads == 1 and result.device == "cpu" and result.tokens_per_s > 0
    model = GPT(replace(MODEL, vocab_size=corpus.tokenizer.vocab_size))
    assert result.params == sum(p.numel() for p in model.parameters())
    assert not result.diverged and result.error == ""


def test_an_absurd_learning_rate_ends_as_diverged_not_as_a_crash(corpus):
    result, _ = train_run(MODEL, corpus, TrainConfig(**{**vars(TRAIN), "lr": 1e6, "warmup_steps": 0}), seed=0)
    assert result.diverged
    assert result.steps_done < TRAIN.steps
    assert math.isnan(result.val_loss)


def test_an_out_of_memory_error_is_recorded(corpus, monkeypatch):
    def oom(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(model_module.GPT, "forward", oom)
    result, _ = train_run(MODEL, corpus, TRAIN, seed=0)
    assert result.error.startswith("out of memory at step 1: CUDA out of memory")
    assert not result.diverged and result.steps_done == 0


def test_warmup_then_cosine_to_a_tenth():
    cfg = TrainConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55)
    assert lr_at(110, cfg) == pytest.approx(0.1)
    steps = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))


def test_weight_decay_applies_to_matrices_only():
    model = GPT(MODEL)
    decay, no_decay = make_optimizer(model, TRAIN).param_groups
    assert decay["weight_decay"] == TRAIN.weight_decay and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_adamw_equals_torch_adamw():
    torch.manual_seed(0)
    ours, reference = GPT(MODEL), GPT(MODEL)
    reference.load_state_dict(ours.state_dict())
    opt_ours = make_optimizer(ours, TRAIN)
    groups = [
        {"params": g["params"], "weight_decay": g["weight_decay"]}
        for g in make_optimizer(reference, TRAIN).param_groups
    ]
    opt_ref = torch.optim.AdamW(groups, lr=TRAIN.lr, betas=(TRAIN.beta1, TRAIN.beta2), foreach=False)
    for step in range(15):
        x = torch.randint(0, MODEL.vocab_size, (4, 16))
        for model, opt in ((ours, opt_ours), (reference, opt_ref)):
            for group in opt.param_groups:
                group["lr"] = TRAIN.lr * (1 + step) / 15  # a changing learning rate, as in a schedule
            _, loss = model(x, x)
            loss.backward()
            opt.step()
            opt.zero_grad()
    for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7, rtol=0)


def test_random_streams_are_independent():
    seeds = {stream_seed(0, s) for s in STREAMS}
    assert len(seeds) == len(STREAMS) == 4
    assert stream_seed(0, "init") != stream_seed(1, "init")


@pytest.mark.parametrize("field,value", [("steps", 0), ("batch_size", -1), ("lr", 0.0), ("lr", -1e-3)])
def test_nonsense_training_settings_are_refused(corpus, field, value):
    from modern_gpt.errors import UserError

    with pytest.raises(UserError, match=field):
        train_run(MODEL, corpus, TrainConfig(**{**vars(TRAIN), field: value}), seed=0)
