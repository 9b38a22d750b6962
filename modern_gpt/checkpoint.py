"""A checkpoint folder: model.safetensors, config.json (every setting), tokenizer.json and metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from .data import tokenizer_from_json
from .errors import UserError
from .files import atomic_path, write_json
from .model import GPT
from .settings import Settings, from_dict

FILES = ("model.safetensors", "config.json", "tokenizer.json", "metrics.json")


def save_checkpoint(folder: Path, model: GPT | None, settings: Settings, tokenizer, metrics: dict) -> None:
    """Every file of a checkpoint; with no model (a diverged run) only config.json and metrics.json."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if model is not None:
            with atomic_path(folder / "model.safetensors") as tmp:
                save_model(model, str(tmp))  # tied weights are stored once
            write_json(folder / "tokenizer.json", tokenizer.to_json())
        write_json(folder / "config.json", {"format": 1, **settings.to_dict()})
        write_json(folder / "metrics.json", metrics)
    except OSError as e:
        raise UserError(f"cannot write the checkpoint to {folder}: {e.strerror or e}; choose another --out.") from None


def load_checkpoint(folder: Path, device: str = "cpu") -> tuple[GPT, Settings, object]:
    """The model (in eval mode), its settings and its tokenizer; a clear error for anything missing or damaged."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(
            f"{folder} is not a checkpoint folder (it does not exist); give a folder written by modern-gpt train."
        )
    missing = [f for f in FILES[:3] if not (folder / f).is_file()]
    if missing:
        raise UserError(
            f"{folder} is not a checkpoint folder: {', '.join(missing)} missing; give a folder written by modern-gpt train."
        )
    try:
        settings = from_dict(json.loads((folder / "config.json").read_text()))
        tokenizer = tokenizer_from_json(json.loads((folder / "tokenizer.json").read_text()))
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{folder}: config.json or tokenizer.json is damaged ({type(e).__name__}: {e}).") from None
    model = GPT(settings.model)
    try:
        missing_keys, unexpected = load_model(model, str(folder / "model.safetensors"), strict=False, device=device)
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise UserError(f"{folder}/model.safetensors is damaged or truncated ({str(e).splitlines()[0]}).") from None
    if missing_keys or unexpected:
        raise UserError(
            f"{folder}/model.safetensors does not match config.json (missing {missing_keys[:3]}, unexpected {unexpected[:3]})."
        )
    return model.to(device).eval(), settings, tokenizer


def generate_text(
    model: GPT, tokenizer, prompt: str, tokens: int, temperature: float, top_k: int | None, seed: int
) -> str:
    """The prompt followed by `tokens` sampled tokens, the same text for the same seed."""
    device = next(model.parameters()).device
    ids = tokenizer.encode(prompt or "\n")  # with no prompt, start as if at the beginning of a line
    if len(ids) == 0:
        raise UserError("the prompt encodes to no tokens; give a longer --prompt.")
    idx = torch.as_tensor(ids, dtype=torch.long, device=device)[None]
    gen = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, tokens, temperature=temperature, top_k=top_k, generator=gen)
    return prompt + tokenizer.decode(out[0, idx.size(1) :].tolist())
