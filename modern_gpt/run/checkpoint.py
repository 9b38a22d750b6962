"""A checkpoint folder: model.safetensors, config.json (every setting), tokenizer.json and metrics.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from ..core.components import PluginError
from ..core.errors import UserError
from ..core.files import atomic_path, not_regular, write_json
from ..core.schema import count, problem
from ..core.settings import Settings, from_dict, saved_settings_problem
from ..data.corpus import tokenizer_from_json
from ..model import plugins
from ..model.gpt import GPT

FILES = ("model.safetensors", "config.json", "tokenizer.json", "metrics.json")


def save_checkpoint(folder: Path, model: GPT | None, settings: Settings, tokenizer, metrics: dict) -> None:
    """Every file of a checkpoint. With no model (a diverged run), only config.json and metrics.json."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if model is None:  # a diverged run: no weights, and none left from an earlier run in this folder
            for name in ("model.safetensors", "tokenizer.json"):
                (folder / name).unlink(missing_ok=True)
        else:
            with atomic_path(folder / "model.safetensors") as tmp:
                save_model(model, str(tmp))  # tied weights are stored once
            write_json(folder / "tokenizer.json", tokenizer.to_json())
        mine = plugins.records([settings.model])  # each plugin file's name and sha256 (generate checks them)
        write_json(folder / "config.json", {"format": 1, **settings.to_dict(), **({"plugins": mine} if mine else {})})
        write_json(folder / "metrics.json", metrics)
    except OSError as e:
        raise UserError(f"cannot write the checkpoint to {folder}: {e.strerror or e}; choose another --out.") from None


def load_checkpoint(folder: Path, device: str = "cpu") -> tuple[GPT, Settings, object]:
    """The model (in eval mode), its settings and its tokenizer. Anything missing or damaged is a clear error."""
    folder = Path(folder)
    _check_files(folder)
    settings = _read_settings(folder)
    tokenizer = _read_tokenizer(folder, settings)
    model = _read_weights(folder, settings, device)
    return model.to(device).eval(), settings, tokenizer


def _check_files(folder: Path) -> None:
    """A folder of modern-gpt's. Each of FILES is a regular file or absent, and the first three are present."""
    if not folder.is_dir():
        what = "it is not a folder" if folder.exists() else "it does not exist"
        raise UserError(f"{folder} is not a checkpoint folder ({what}); give a folder written by modern-gpt train.")
    arch = _transformers_class(folder)
    if arch:
        raise UserError(
            f"{folder} is a Hugging Face transformers folder ({arch}), not a modern-gpt checkpoint: load it with "
            f"transformers (pipeline('text-generation', model={str(folder)!r}) or AutoModelForCausalLM.from_pretrained), "
            "or give the modern-gpt checkpoint it was exported from."
        )
    for name in FILES:  # before any open: reading a pipe waits for ever, a device never ends
        what = not_regular(folder / name)
        if what:
            raise UserError(f"{folder}/{name} is {what}, not a file; give a folder written by modern-gpt train.")
    missing = [f for f in FILES[:3] if not (folder / f).is_file()]
    failed = _failed_run(folder)
    if "model.safetensors" in missing and failed:
        raise UserError(f"{folder} holds a run that {failed}; no weights were saved (its metrics are in metrics.json).")
    if missing:
        raise UserError(
            f"{folder} is not a checkpoint folder: {', '.join(missing)} missing; give a folder written by modern-gpt train."
        )


def _read_settings(folder: Path) -> Settings:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        recorded = config.get("plugins") if isinstance(config, dict) else None
        why = problem(recorded, [plugins.RECORD_SCHEMA], "plugins") if recorded is not None else None
        if why is None and recorded:  # before the settings name their components; its own sentence
            try:
                plugins.check_recorded(recorded, folder)
            except PluginError as e:
                raise UserError(str(e)) from e
        why = why or saved_settings_problem(
            {k: v for k, v in config.items() if k not in ("format", "plugins")} if isinstance(config, dict) else config
        )
    except (OSError, ValueError) as e:
        why = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    if why:
        raise UserError(f"{folder}/config.json is damaged ({why}); train the checkpoint again.")
    return from_dict(config)


def _read_tokenizer(folder: Path, settings: Settings):
    try:
        tokenizer = tokenizer_from_json(json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")))
    except Exception as e:  # the tokenizers library raises a bare Exception for a file it cannot parse
        text = (str(e).splitlines() or [""])[0][:120]
        raise UserError(
            f"{folder}/tokenizer.json is damaged ({type(e).__name__}: {text}); train the checkpoint again."
        ) from None
    if tokenizer.vocab_size != settings.model.vocab_size:
        raise UserError(
            f"{folder}: tokenizer.json has {tokenizer.vocab_size} token ids and config.json's model "
            f"{settings.model.vocab_size}: they do not belong to the same checkpoint."
        )
    return tokenizer


def _read_weights(folder: Path, settings: Settings, device: str) -> GPT:
    """The weights, into a model of config.json's shapes. Every one must be finite."""
    _check_shapes(folder, settings)  # before building anything: a wrong config.json must not build a huge model
    model = GPT(settings.model)
    try:
        missing_keys, unexpected = load_model(model, str(folder / "model.safetensors"), strict=False, device=device)
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise UserError(f"{folder}/model.safetensors is damaged or truncated ({str(e).splitlines()[0]}).") from None
    if missing_keys or unexpected:  # safetensors gives lists or sets, by version
        missing, extra = sorted(missing_keys)[:3], sorted(unexpected)[:3]
        raise UserError(
            f"{folder}/model.safetensors does not match config.json (missing {missing}, unexpected {extra})."
        )
    bad = next(
        (k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.isfinite(v).all()), None
    )
    if bad is not None:  # sampling from them would fail deep inside torch
        raise UserError(
            f"{folder}/model.safetensors holds weights that are not finite (NaN or infinite, first in {bad}); "
            "train the checkpoint again."
        )
    return model


def _transformers_class(folder: Path) -> str:
    """The class a transformers folder's config.json names ('a gpt2 model' with no class), else ''.
    modern-gpt's own config.json has a 'format', and no 'model_type' or 'architectures'."""
    path = folder / "config.json"
    if not path.is_file() or path.stat().st_size > 1 << 20:  # is_file: never a pipe; a config of a megabyte is neither
        return ""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(config, dict) or "format" in config:
        return ""
    archs, model_type = config.get("architectures"), config.get("model_type")
    if isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs):
        return ", ".join(archs)
    return f"a {model_type} model" if isinstance(model_type, str) and model_type else ""


def _failed_run(folder: Path) -> str:
    """What metrics.json records of a run that saved no weights: 'diverged after N steps' or 'failed: why'.
    Else ''."""
    if not (folder / "metrics.json").is_file():  # is_file: never a pipe, which would block the read
        return ""
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(metrics, dict):
        return ""
    if metrics.get("diverged"):
        return f"diverged (the loss or an update became NaN or infinite) after {count(metrics.get('steps_done', '?'), 'step')}"
    if metrics.get("error"):
        return f"failed ({str(metrics['error']).rstrip('.')})"
    return ""


def _check_shapes(folder: Path, settings: Settings) -> None:
    """model.safetensors's header against the shapes config.json implies, read without loading a weight."""
    path = folder / "model.safetensors"
    try:
        with safe_open(str(path), "pt") as f:
            stored = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise UserError(f"{path} is damaged or truncated ({(str(e).splitlines() or [''])[0]}).") from None
    model_cfg = settings.model
    layers = {int(k.split(".")[1]) for k in stored if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    emb = stored.get("tok_emb.weight", stored.get("lm_head.weight"))
    # checked first: cheap whatever the numbers
    if len(layers) != model_cfg.layers or emb != (model_cfg.vocab_size, model_cfg.dim):
        raise UserError(
            f"{path} does not match config.json: the weights have {len(layers)} layers and a {list(emb or [])} "
            f"embedding, config.json {model_cfg.layers} layers and [{model_cfg.vocab_size}, {model_cfg.dim}]."
        )
    with torch.device("meta"):  # shapes only: no memory, whatever config.json says
        expected = {k: tuple(v.shape) for k, v in GPT(model_cfg).state_dict().items()}
    if model_cfg.tie_embeddings:  # tied weights are stored once, under either name
        for a, b in (("lm_head.weight", "tok_emb.weight"), ("tok_emb.weight", "lm_head.weight")):
            if a not in stored and b in stored:
                expected.pop(a, None)
    for name, shape in stored.items():
        if name in expected and expected[name] != shape:
            raise UserError(
                f"{path} does not match config.json: {name} is {list(shape)} in the weights and "
                f"{list(expected[name])} by config.json."
            )
    missing, unexpected = sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise UserError(f"{path} does not match config.json (missing {missing[:3]}, unexpected {unexpected[:3]}).")


MAX_TOKENS = 100_000  # --tokens: hours of sampling on a CPU already; a typing mistake above it, not a request


def check_sampling(tokens: int, temperature: float, top_k: int | None) -> None:
    """generate's settings, checked before a checkpoint is read. The first that is wrong is one sentence.
    Every value that passes is well defined. Temperature 0 is greedy, and a tiny one tends to it. A huge one
    tends to uniform sampling (model.generate). A top-k above the vocabulary keeps every token. 0 tokens print
    the prompt."""
    if not 0 <= tokens <= MAX_TOKENS:
        raise UserError(f"--tokens must be between 0 and {MAX_TOKENS:,}, got {tokens}.")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise UserError(f"--temperature must be a finite number of 0 or more, got {temperature}.")
    if top_k is not None and top_k < 1:
        raise UserError(f"--top-k must be at least 1, got {top_k}.")


def generate_text(
    model: GPT, tokenizer, prompt: str, tokens: int, temperature: float, top_k: int | None, seed: int
) -> str:
    """The prompt followed by `tokens` sampled tokens. The same seed gives the same text.

    The new ids are decoded together with the prompt's, as transformers decodes a generated sequence
    (tokenizer.decode(model.generate(...)[0])). A SentencePiece-style decoder (Llama's) strips the space of
    a leading '▁' only at a text's start. Decoded alone, the first new token would lose its space.
    The prompt stays as typed when its decoding begins the full text.
    """
    device = next(model.parameters()).device
    ids = tokenizer.encode(prompt or "\n")  # with no prompt, start as if at the beginning of a line
    if len(ids) == 0:
        raise UserError("the prompt encodes to no tokens; give a longer --prompt.")
    idx = torch.as_tensor(ids, dtype=torch.long, device=device)[None]
    gen = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, tokens, temperature=temperature, top_k=top_k, generator=gen)
    new = out[0, out.size(1) - tokens :].tolist()  # model.generate keeps only the last context of a long prompt
    head, full = tokenizer.decode(ids.tolist()), tokenizer.decode(ids.tolist() + new)
    if full.startswith(head):  # the prompt as typed, then what the new ids add to its decoding
        return prompt + full[len(head) :]
    return full  # a normaliser changed the prompt's text (e.g. its case): the whole decoding, nothing dropped
