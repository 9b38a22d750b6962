"""The ablation harness: plans of variants, paired seeds, parallel runs, resume.

Every variant runs with every seed on the same corpus; a seed fixes the batch order
and the evaluation windows, so the per-seed differences between two rows are paired.
Runs are written to the results folder as they finish, seed by seed, so that an
interrupted ablation has complete pairs and resumes where it stopped.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as dt
import multiprocessing as mp
import platform
import queue
import subprocess
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import torch

from . import __version__
from .data import DataConfig, load_corpus
from .errors import UserError
from .model import COMPONENTS, ModelConfig, kv_cache_bytes_per_token, non_embedding_params, param_counts
from .results import ResultsDir
from .settings import Settings, from_dict
from .train import TrainConfig, default_threads, train_run

PLANS = ("cumulative", "single", "leave-one-out", "custom")
MATCH_TOLERANCE = 0.01  # --match-params: non-embedding parameters within 1% of the first row's


@dataclass(frozen=True)
class Variant:
    name: str
    components: tuple[str, ...]
    reference: int | None  # the row this one is compared with; None for the first row
    mlp_hidden: int | None = None  # set by --match-params

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "components": list(self.components),
            "reference": self.reference,
            "mlp_hidden": self.mlp_hidden,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Variant:
        return cls(d["name"], tuple(d["components"]), d["reference"], d.get("mlp_hidden"))


# ---------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------
def parse_components(text: str | None) -> tuple[str, ...]:
    """A comma list of component names, checked and in the order given."""
    if text is None:
        return COMPONENTS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for n in names:
        if n not in COMPONENTS:
            raise UserError(f"unknown component {n!r}; the components are {', '.join(COMPONENTS)}.")
    if len(set(names)) != len(names):
        raise UserError(f"--components names a component twice: {text}.")
    if not names:
        raise UserError("--components is empty; give a comma list such as rmsnorm,rope.")
    return names


def parse_variant(name: str) -> tuple[str, ...]:
    """'classic', 'modern', or components joined by '+' (e.g. 'rmsnorm+rope')."""
    name = name.strip()
    if name == "classic":
        return ()
    if name == "modern":
        return COMPONENTS
    parts = [p.strip() for p in name.split("+")]
    for p in parts:
        if p not in COMPONENTS:
            raise UserError(
                f"unknown variant part {p!r} in {name!r}; a variant is classic, modern, or components joined by + "
                f"({', '.join(COMPONENTS)})."
            )
    return tuple(c for c in COMPONENTS if c in parts)


def make_plan(plan: str, components: tuple[str, ...] = COMPONENTS, variants: str | None = None) -> list[Variant]:
    if plan not in PLANS:
        raise UserError(f"unknown plan {plan!r}; choose one of {', '.join(PLANS)}.")
    if plan != "custom" and variants:
        raise UserError("--variants goes with --plan custom; the other plans make their own rows.")
    if plan == "cumulative":
        rows = [Variant("classic", (), None)]
        for i, c in enumerate(components):
            rows.append(Variant(f"+{c}", components[: i + 1], i))
        return rows
    if plan == "single":
        return [Variant("classic", (), None)] + [Variant(c, (c,), 0) for c in components]
    if plan == "leave-one-out":
        rows = [Variant("modern", COMPONENTS, None)]
        return rows + [Variant(f"-{c}", tuple(x for x in COMPONENTS if x != c), 0) for c in components]
    if not variants:
        raise UserError('--plan custom needs --variants, e.g. --variants "classic;rmsnorm+rope;modern".')
    names = [v.strip() for v in variants.split(";") if v.strip()]
    return [Variant(n, parse_variant(n), i - 1 if i else None) for i, n in enumerate(names)]


def seed_list(seeds: int | None, seed_list_text: str | None) -> list[int]:
    if seeds is not None and seed_list_text:
        raise UserError("--seeds and --seed-list both choose the seeds; give one of them.")
    if seed_list_text:
        try:
            out = [int(s) for s in seed_list_text.split(",") if s.strip()]
        except ValueError:
            raise UserError(f"--seed-list must be whole numbers separated by commas, got {seed_list_text!r}.") from None
        if not out or min(out) < 0 or len(set(out)) != len(out):
            raise UserError(f"--seed-list needs distinct seeds of 0 or more, got {seed_list_text!r}.")
        return out
    n = 3 if seeds is None else seeds
    if n < 1:
        raise UserError(f"--seeds must be at least 1, got {n}.")
    return list(range(n))


def match_params(variants: list[Variant], base: ModelConfig) -> list[Variant]:
    """Give every row after the first an MLP hidden width that brings its non-embedding
    parameter count within 1% of the first row's."""
    target = non_embedding_params(param_counts(base.with_components(variants[0].components)))
    out = [variants[0]]
    for v in variants[1:]:
        cfg = base.with_components(v.components)

        def count(hidden: int, cfg=cfg) -> int:
            return non_embedding_params(param_counts(replace(cfg, mlp_hidden=hidden)))

        slope = count(2) - count(1)  # the count is linear in the hidden width
        hidden = max(1, round((target - count(1)) / slope) + 1)
        if abs(count(hidden) - target) > MATCH_TOLERANCE * target:
            raise UserError(
                f"--match-params cannot bring {v.name} within 1% of {variants[0].name}'s {target:,} non-embedding "
                f"parameters by its MLP width alone (closest: {count(hidden):,} at width {hidden})."
            )
        out.append(replace(v, mlp_hidden=hidden))
    return out


def variant_config(base: ModelConfig, v: Variant) -> ModelConfig:
    cfg = base.with_components(v.components)
    return replace(cfg, mlp_hidden=v.mlp_hidden) if v.mlp_hidden is not None else cfg


# ---------------------------------------------------------------------------
# The specification: everything that decides the numbers. --resume compares it.
# ---------------------------------------------------------------------------
@dataclass
class Spec:
    settings: Settings
    plan: str
    variants: list[Variant]
    seeds: list[int]
    match_params: bool = False
    data_key: str = ""  # the corpus's content hash and tokenizer settings
    data_name: str = ""

    def to_dict(self) -> dict:
        return {
            "settings": self.settings.to_dict(),
            "plan": self.plan,
            "variants": [v.to_dict() for v in self.variants],
            "seeds": self.seeds,
            "match_params": self.match_params,
            "data_key": self.data_key,
            "data_name": self.data_name,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Spec:
        return cls(
            from_dict(d["settings"]),
            d["plan"],
            [Variant.from_dict(v) for v in d["variants"]],
            list(d["seeds"]),
            d["match_params"],
            d["data_key"],
            d["data_name"],
        )


def spec_differences(stored: dict, requested: dict) -> list[str]:
    """The settings in which two specs differ, as 'key: stored -> requested'."""
    out = []

    def walk(a, b, prefix):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
        elif a != b:
            out.append(f"{prefix}: {a!r} -> {b!r}")

    walk(stored, requested, "")
    return out


def variant_info(spec: Spec, vocab_size: int) -> list[dict]:
    """Per row: the facts that do not need a run (params, MLP width, KV-cache bytes)."""
    base = replace(spec.settings.model, vocab_size=vocab_size)
    out = []
    for v in spec.variants:
        cfg = variant_config(base, v)
        out.append(
            {
                **v.to_dict(),
                "params": param_counts(cfg)["total"],
                "hidden": cfg.hidden,
                "kv_cache_bytes_per_token": kv_cache_bytes_per_token(cfg),
            }
        )
    return out


def environment(device: str) -> dict:
    versions = {}
    for pkg in ("torch", "numpy", "pandas", "tokenizers", "safetensors", "typer", "rich"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return {
        "modern_gpt": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
        "git_commit": _git_commit(),
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    row: int
    variant: Variant
    seed: int
    model: ModelConfig
    train: TrainConfig
    data: DataConfig
    threads: int


_corpora: dict = {}  # per process: each corpus loaded once (memory-mapped from the token cache)


def execute(job: Job, on_step=None) -> dict:
    """One run as a results record. on_step(row, seed, step, loss) follows its progress."""
    key = repr(job.data)
    if key not in _corpora:
        _corpora[key] = load_corpus(job.data)
    progress = None if on_step is None else lambda step, loss: on_step(job.row, job.seed, step, loss)
    cfg = variant_config(job.model, job.variant)
    result, _ = train_run(cfg, _corpora[key], job.train, job.seed, progress, job.threads)
    record = result.to_dict()
    record.update(
        row=job.row, variant=job.variant.name, components="+".join(job.variant.components), mlp_hidden=cfg.hidden
    )
    return record


def _execute_in_worker(job: Job, events) -> dict:
    last = [0.0]

    def on_step(row: int, seed: int, step: int, loss: float) -> None:
        if time.monotonic() - last[0] > 0.2:  # a few updates a second are enough for a display
            last[0] = time.monotonic()
            events.put((row, seed, step, loss))

    return execute(job, on_step)


@dataclass
class Ablation:
    """An ablation bound to its results folder."""

    spec: Spec
    results: ResultsDir
    jobs: int = 1

    def pending(self) -> list[Job]:
        done = self.results.finished()
        s = self.spec.settings
        threads = s.train.threads or default_threads(self.jobs)
        return [
            Job(row, v, seed, s.model, s.train, s.data, threads)
            for seed in self.spec.seeds  # seed-major: an interrupted ablation leaves complete pairs
            for row, v in enumerate(self.spec.variants)
            if (row, seed) not in done
        ]

    def run(self, display) -> None:
        """Run every pending job and write each finished run at once.
        display: start(total, done), step(row, seed, step, loss), finished(record)."""
        jobs = self.pending()
        total = len(self.spec.variants) * len(self.spec.seeds)
        display.start(total, total - len(jobs))
        if self.jobs <= 1:
            for job in jobs:
                record = execute(job, display.step)
                self.results.write_run(record)
                display.finished(record)
        else:
            self._run_parallel(jobs, display)

    def _run_parallel(self, jobs: list[Job], display) -> None:
        ctx = mp.get_context("spawn")  # fork after torch has started its threads can deadlock
        with ctx.Manager() as manager:
            events = manager.Queue()
            pool = cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx)
            try:
                waiting = {pool.submit(_execute_in_worker, job, events) for job in jobs}
                while waiting:
                    done, waiting = cf.wait(waiting, timeout=0.1, return_when=cf.FIRST_COMPLETED)
                    while True:
                        try:
                            display.step(*events.get_nowait())
                        except queue.Empty:
                            break
                    for fut in done:
                        record = fut.result()
                        self.results.write_run(record)
                        display.finished(record)
            finally:
                pool.shutdown(wait=False, cancel_futures=True)
