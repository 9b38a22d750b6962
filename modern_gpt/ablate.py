"""The ablation harness: plans of variants, paired seeds, parallel runs, resume.

Every variant runs with every seed on the same corpus; a seed fixes the batch order
and the evaluation windows, so the per-seed differences between two rows are paired.
Runs are written to the results folder as they finish, seed by seed, so that an
interrupted ablation has complete pairs and resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing as mp
import os
import platform
import queue
import signal
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, fields, replace
from importlib import metadata
from pathlib import Path

import torch

from . import __version__
from .data import Corpus, DataConfig, check_length, load_corpus
from .errors import UserError
from .model import COMPONENTS, ModelConfig, kv_cache_bytes_per_token, non_embedding_params, param_counts
from .results import ResultsDir, settings_hash
from .settings import Settings, from_dict
from .stats import look_level
from .train import RunResult, TrainConfig, check_memory, default_threads, is_oom, resolve_device, train_run

PLANS = ("cumulative", "single", "leave-one-out", "custom", "duel", "power")
POWER_SEEDS = 8  # `modern-gpt power`: seeds of the first variant and of its placebo
MATCH_TOLERANCE = 0.01  # --match-params: non-embedding parameters within 1% of the first row's
# --jobs auto on CUDA: runs at once on the GPU. 1 until measured: bench/bench_gpu.py (b) prints the total tokens/s
# of 1, 2, 4 and 8 concurrent shakespeare-size runs on one GPU; set this from that table, not from a guess.
RUNS_PER_GPU = 1


@dataclass(frozen=True)
class Variant:
    name: str
    components: tuple[str, ...]
    reference: int | None  # the row this one is compared with; None for the first row
    mlp_hidden: int | None = None  # set by --match-params
    placebo: bool = False  # the first row again with only its weight-init stream changed: the noise floor

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "components": list(self.components),
            "reference": self.reference,
            "mlp_hidden": self.mlp_hidden,
            "placebo": self.placebo,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Variant:
        return cls(d["name"], tuple(d["components"]), d["reference"], d.get("mlp_hidden"), d.get("placebo", False))


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
    if plan not in ("custom", "power") and variants:
        raise UserError("--variants goes with --plan custom; the other plans make their own rows.")
    if plan == "power":  # one architecture; plan_spec adds its placebo
        name = variants or "classic"
        return [Variant(name, parse_variant(name), None)]
    if plan == "cumulative":
        rows = [Variant("classic", (), None)]
        for i, c in enumerate(components):
            rows.append(Variant(f"+{c}", components[: i + 1], i))
        return rows
    if plan == "single":
        return [Variant("classic", (), None)] + [Variant(c, (c,), 0) for c in components]
    if plan == "duel":  # the two complete architectures: GPT-2 against a Llama-style model
        return [Variant("classic", (), None), Variant("modern", COMPONENTS, 0)]
    if plan == "leave-one-out":
        rows = [Variant("modern", COMPONENTS, None)]
        return rows + [Variant(f"-{c}", tuple(x for x in COMPONENTS if x != c), 0) for c in components]
    if not variants:
        raise UserError('--plan custom needs --variants, e.g. --variants "classic;rmsnorm+rope;modern".')
    names = [v.strip() for v in variants.split(";") if v.strip()]
    if not names:
        raise UserError(f'--variants {variants!r} names no rows; give e.g. --variants "classic;rmsnorm+rope;modern".')
    return [Variant(n, parse_variant(n), i - 1 if i else None) for i, n in enumerate(names)]


def add_placebo(rows: list[Variant]) -> list[Variant]:
    """The plan with its first row repeated right under it, with only the weight-init stream changed and
    compared with the first row: its delta shows what initialisation alone does on this data and budget."""
    first = rows[0]
    placebo = replace(first, name=f"{first.name} (placebo)", reference=0, placebo=True)
    shifted = [replace(v, reference=v.reference + 1 if v.reference else v.reference) for v in rows[1:]]
    return [first, placebo, *shifted]


AUTO = "auto"


def parse_seeds(text: str | int | None) -> int | str | None:
    """--seeds: a whole number, or auto (seeds until every row is decided)."""
    if text is None or isinstance(text, int):
        return text
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise UserError(f"--seeds must be a whole number or auto, got {text!r}.") from None


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
    alpha: float = 0.05  # the family-wise error rate of the table's verdicts
    margin: float | None = None  # nats: with it, `same` when an equivalence test shows |delta| < margin
    min_seeds: int | None = None  # --seeds auto: the first look; the seeds list then runs to --max-seeds

    def to_dict(self) -> dict:
        return {
            "settings": self.settings.to_dict(),
            "plan": self.plan,
            "variants": [v.to_dict() for v in self.variants],
            "seeds": self.seeds,
            "match_params": self.match_params,
            "data_key": self.data_key,
            "data_name": self.data_name,
            "alpha": self.alpha,
            "margin": self.margin,
            "min_seeds": self.min_seeds,
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
            d.get("alpha", 0.05),
            d.get("margin"),
            d.get("min_seeds"),
        )

    @property
    def sequential(self) -> bool:
        return self.min_seeds is not None

    @property
    def tested_rows(self) -> int:
        """The rows with a reference: the family whose false positives the verdicts control."""
        return sum(v.reference is not None for v in self.variants)

    def level(self) -> float:
        """The level Holm-adjusted p-values are compared with: alpha, or the per-look level of --seeds auto."""
        if not self.sequential:
            return self.alpha
        return look_level(self.alpha, max(1, self.tested_rows), self.min_seeds, len(self.seeds))


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


def execute(job: Job, corpus: Corpus, on_step=None) -> dict:
    """One run as a results record, on the corpus the driver loaded and hashed (never read again here, so
    that every run trains on the tokens meta.json's data_key names). on_step(row, seed, step, loss) follows
    its progress. Running out of memory, even before the first step, is a recorded failure, not an exception."""
    progress = None if on_step is None else lambda step, loss: on_step(job.row, job.seed, step, loss)
    cfg = variant_config(job.model, job.variant)
    try:
        init = "placebo" if job.variant.placebo else "init"
        result, _ = train_run(cfg, corpus, job.train, job.seed, progress, job.threads, init=init)
        record = result.to_dict()
    except (RuntimeError, MemoryError) as e:
        if not is_oom(e):
            raise
        record = _failed_record(job, cfg, corpus, f"out of memory before training: {(str(e).splitlines() or [type(e).__name__])[0]}")
    record.update(
        row=job.row,
        variant=job.variant.name,
        components="+".join(job.variant.components),
        mlp_hidden=cfg.hidden,
        settings_hash=settings_hash(Settings(job.model, job.train, job.data).to_dict(), corpus.key),
    )
    return record


def _failed_record(job: Job, cfg: ModelConfig, corpus: Corpus, error: str) -> dict:
    nan = float("nan")
    record = {f.name: None for f in fields(RunResult)}
    record.update(
        seed=job.seed, params=param_counts(replace(cfg, vocab_size=corpus.tokenizer.vocab_size))["total"],
        train_loss=nan, val_loss=nan, val_bpc=nan, val_ppl=nan, best_val_loss=nan, best_step=0, steps_done=0,
        tokens_seen=0, epochs=0.0, tokens_per_s=0.0, secs=0.0, threads=job.threads, device=job.train.device,
        diverged=False, error=error, curve=[],
    )  # fmt: skip
    return record


# In a worker process: the queue its progress goes to, and the driver's corpus (from the pool's initializer).
_events = None
_corpus: Corpus | None = None


def _worker_init(events, corpus: Corpus) -> None:
    global _events, _corpus
    _events, _corpus = events, corpus
    # Ctrl-C reaches every process of the terminal; the parent alone decides, and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked while the worker started (see Ablation._run_parallel)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGHUP})


def _execute_in_worker(job: Job) -> dict:
    last = [0.0]

    def on_step(row: int, seed: int, step: int, loss: float) -> None:
        if time.monotonic() - last[0] > 0.2:  # a few updates a second are enough for a display
            last[0] = time.monotonic()
            _events.put((row, seed, step, loss))

    return execute(job, _corpus, on_step)


def plan_spec(
    settings: Settings,
    plan: str,
    components: str | None = None,
    variants: str | None = None,
    seeds: int | str | None = None,
    seed_list_text: str | None = None,
    match: bool = False,
    placebo: bool | None = None,
    alpha: float | None = None,
    margin: float | None = None,
    min_seeds: int | None = None,
    max_seeds: int | None = None,
) -> Spec:
    """The specification of a new ablation from the command line's choices (None: the default)."""
    alpha = 0.05 if alpha is None else alpha
    placebo = True if placebo is None or plan == "power" else placebo
    if plan == "power" and seeds is None:
        seeds = POWER_SEEDS
    check_statistics(alpha, margin)
    if plan == "custom" and components is not None:
        raise UserError("--components does not go with --plan custom, whose rows --variants names; leave one out.")
    rows = make_plan(plan, parse_components(components), variants)
    if match:
        rows = match_params(rows, settings.model)
    if placebo:
        rows = add_placebo(rows)
    seeds = parse_seeds(seeds)
    if seeds == AUTO:
        if seed_list_text:
            raise UserError("--seeds auto chooses seeds 0, 1, 2, ... itself; leave out --seed-list.")
        low, high = 3 if min_seeds is None else min_seeds, 10 if max_seeds is None else max_seeds
        if low < 2:
            raise UserError(f"--min-seeds must be at least 2 (a paired test needs two pairs), got {low}.")
        if high < low:
            raise UserError(f"--max-seeds ({high}) must be at least --min-seeds ({low}).")
        return Spec(settings, plan, rows, list(range(high)), match, alpha=alpha, margin=margin, min_seeds=low)
    if min_seeds is not None or max_seeds is not None:
        raise UserError("--min-seeds and --max-seeds go with --seeds auto.")
    return Spec(settings, plan, rows, seed_list(seeds, seed_list_text), match, alpha=alpha, margin=margin)


def check_statistics(alpha: float, margin: float | None) -> None:
    if not 0 < alpha < 1:
        raise UserError(f"--alpha must be between 0 and 1, got {alpha}.")
    if margin is not None and not (0 < margin < float("inf")):
        raise UserError(f"--margin must be a positive number of nats, got {margin}.")


def check_jobs(jobs: int | str) -> int | str:
    """--jobs: a whole number of 1 or more, or auto (the best use of this machine); returns it parsed."""
    if isinstance(jobs, str):
        if jobs.strip().lower() == AUTO:
            return AUTO
        try:
            jobs = int(jobs)
        except ValueError:
            raise UserError(f"--jobs must be a whole number or auto, got {jobs!r}.") from None
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}.")
    return jobs


def workers(jobs: int | str, device: str, pending: int) -> int:
    """How many runs go at once. auto: on a CPU one single-thread run per core (two single-thread
    processes trained 1.7x the tokens/s of one two-thread process on a 2-core machine), on CUDA
    RUNS_PER_GPU, on another GPU one; never more workers than runs to do."""
    if jobs != AUTO:
        return jobs
    per_machine = {"cpu": os.cpu_count() or 1, "cuda": RUNS_PER_GPU}.get(device, 1)
    return max(1, min(per_machine, pending))


def default_folder(plan: str) -> Path:
    base = Path("results") / f"{time.strftime('%Y%m%d-%H%M%S')}-{plan}"
    folder, n = base, 2
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder


def start(spec: Spec, out: Path | None, jobs: int, command: str) -> Ablation:
    """A new ablation: the corpus checked, the results folder created with its meta.json."""
    jobs = check_jobs(jobs)
    device = resolve_device(spec.settings.train.device)
    corpus = load_corpus(spec.settings.data)
    check_length(corpus, spec.settings.model.context)
    for v in spec.variants:  # a size that cannot fit is refused before anything is written
        cfg = replace(variant_config(spec.settings.model, v), vocab_size=corpus.tokenizer.vocab_size)
        check_memory(cfg, spec.settings.train, device)
    spec.data_key, spec.data_name = corpus.key, corpus.name
    results = ResultsDir(out or default_folder(spec.plan))
    results.check_new()
    meta = {
        "command": command,
        "spec": spec.to_dict(),
        "variants": variant_info(spec, corpus.tokenizer.vocab_size),
        "jobs": jobs,
        **environment(device),
        "started": now(),
        "finished": None,
        "status": "running",
    }
    results.create(meta)
    return Ablation(spec, results, meta, jobs, corpus)


def resume(folder: Path, requested: Spec | None, jobs: int) -> Ablation:
    """An interrupted ablation, with its own settings; `requested` (when flags were given) must match them."""
    jobs = check_jobs(jobs)
    results = ResultsDir(folder)
    meta = results.read_meta()
    owner = results.owner()
    if owner is not None:  # before the corpus is loaded: say it at once
        raise UserError(
            f"{folder} is being written by another modern-gpt process (pid {owner or 'not yet written'}); "
            "wait for it to finish or stop it first."
        )
    spec = Spec.from_dict(meta["spec"])
    corpus = load_corpus(spec.settings.data)
    if requested is not None:
        requested.data_key, requested.data_name = corpus.key, corpus.name
        diffs = spec_differences(meta["spec"], requested.to_dict())
        if diffs:
            raise UserError(
                f"{folder} was made with other settings ({'; '.join(diffs[:4])}); resume with the same settings, "
                f"or with --resume {folder} alone, which reuses them."
            )
    if corpus.key != spec.data_key:
        raise UserError(
            f"the data of {folder} ({spec.data_name}) has changed since the ablation started; start a new one."
        )
    resolve_device(spec.settings.train.device)
    meta["resumed"] = [*meta.get("resumed", []), now()]
    return Ablation(spec, results, meta, jobs, corpus)


def failure_reason(e: BaseException) -> str:
    """One line for meta.json's error: a user error's sentence, or the exception's type and first line."""
    text = (str(e).splitlines() or [""])[0]
    return text if isinstance(e, UserError) else f"{type(e).__name__}: {text}".rstrip(": ")


@dataclass
class Ablation:
    """An ablation bound to its results folder."""

    spec: Spec
    results: ResultsDir
    meta: dict
    jobs: int | str = 1  # or "auto"
    corpus: Corpus | None = None  # loaded and hashed by the driver: the tokens every run trains on

    @property
    def total(self) -> int:
        """The runs planned so far: every variant x seed, or with --seeds auto those of the rounds begun."""
        seeds = len(self.spec.seeds)
        if self.spec.sequential:
            seq = self.meta.get("sequential") or {}
            looks = seq.get("looks") or []
            seeds = min(seeds, looks[-1]["seeds"] + (not seq.get("stopped")) if looks else self.spec.min_seeds)
        return len(self.spec.variants) * seeds

    def pending(self, seeds: int | None = None) -> list[Job]:
        """The runs not finished yet, among the first `seeds` seeds (all of them by default)."""
        done = self.results.finished()
        s = self.spec.settings
        threads = s.train.threads or self._auto_threads()
        return [
            Job(row, v, seed, s.model, s.train, s.data, threads)
            for seed in self.spec.seeds[:seeds]  # seed-major: an interrupted ablation leaves complete pairs
            for row, v in enumerate(self.spec.variants)
            if (row, seed) not in done
        ]

    def _auto_threads(self) -> int:
        """Torch threads per run when --threads is not set: one per run with --jobs auto on a CPU (so the
        numbers equal --jobs 1 --threads 1 bitwise), else the cores divided among the runs at once."""
        if self.jobs == AUTO:
            return 1 if resolve_device(self.spec.settings.train.device) == "cpu" else default_threads(1)
        return default_threads(self.jobs)

    def _run_jobs(self, jobs: list[Job], display) -> None:
        n = workers(self.jobs, resolve_device(self.spec.settings.train.device), len(jobs))
        if n <= 1:
            for job in jobs:
                record = execute(job, self.corpus, display.step)
                self.results.write_run(record)
                display.finished(record)
        else:
            self._run_parallel(jobs, display, n)

    def _run_rounds(self, display) -> None:
        """Every pending run; with --seeds auto, a round of seeds at a time, testing every row after each
        round and stopping once every row is decided or --max-seeds is reached. The looks are recomputed
        from the finished runs on --resume, so a resumed ablation stops where the first would have."""
        if not self.spec.sequential:
            jobs = self.pending()
            display.start(self.total, self.total - len(jobs))
            self._run_jobs(jobs, display)
            return
        from .report import decided_rows  # the verdicts, computed as the table computes them

        seq = self.meta["sequential"] = {
            "min_seeds": self.spec.min_seeds,
            "max_seeds": len(self.spec.seeds),
            "level": self.spec.level(),
            "looks": [],
            "stopped": False,
        }
        n = self.spec.min_seeds
        while True:
            jobs = self.pending(n)
            rows = len(self.spec.variants)
            display.start(rows * n, rows * n - len(jobs))
            self._run_jobs(jobs, display)
            decided, tested = decided_rows(self.meta, self.results.runs(), n)
            seq["looks"].append({"seeds": n, "decided": decided, "rows": tested, "at": now()})
            seq["stopped"] = decided == tested or n == len(self.spec.seeds)
            self.results.write_meta(self.meta)
            if seq["stopped"]:
                return
            n += 1

    def run(self, display) -> None:
        """Run every pending job and write each finished run at once; Ctrl-C keeps them and marks the folder.
        display: start(total, done), step(row, seed, step, loss), finished(record)."""
        self.results.lock()
        try:
            self.meta.update(status="running")
            self.results.write_meta(self.meta)
            # on resume, the CSVs are rebuilt from runs/, whatever befell them
            self.results.write_tables(self.results.finished())
            self._run_rounds(display)
            self.meta.update(status="finished", finished=now())
        except BaseException as e:  # the folder tells the truth: interrupted, or failed and why
            if isinstance(e, KeyboardInterrupt):
                self.meta.update(status="interrupted", interrupted=now())
            else:
                self.meta.update(status="failed", failed=now(), error=failure_reason(e))
            with contextlib.suppress(UserError):  # a full disk: the error being raised says so already
                self.results.write_meta(self.meta)
            raise
        else:
            self.results.write_meta(self.meta)
        finally:
            self.results.unlock()

    def _run_parallel(self, jobs: list[Job], display, n: int) -> None:
        ctx = mp.get_context("spawn")  # fork after torch has started its threads can deadlock
        events = ctx.Queue()
        # The driver's corpus goes to every worker once, through the initializer: no worker reads the data files.
        pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init, initargs=(events, self.corpus))
        try:
            # The workers start here. They ignore the terminal's signals once their initializer has run; until
            # then a Ctrl-C would print a traceback from each, so they are born with those signals blocked.
            terminal = {getattr(signal, n) for n in ("SIGINT", "SIGHUP") if hasattr(signal, n)}
            masked = hasattr(signal, "pthread_sigmask")
            before = signal.pthread_sigmask(signal.SIG_BLOCK, terminal) if masked else None
            try:
                order = {pool.submit(_execute_in_worker, job): i for i, job in enumerate(jobs)}
            finally:
                if masked:
                    signal.pthread_sigmask(signal.SIG_SETMASK, before)
            waiting = set(order)
            while waiting:
                done, waiting = wait(waiting, timeout=0.05, return_when=FIRST_COMPLETED)
                while True:
                    try:
                        display.step(*events.get_nowait())
                    except queue.Empty:
                        break
                for future in sorted(done, key=order.get):
                    try:
                        record = future.result()  # a worker's exception is raised here
                    except BrokenProcessPool:
                        raise UserError(
                            "a worker process died (killed from outside, or by the system for lack of memory); "
                            "the finished runs are kept, and --resume runs the others (fewer --jobs need less memory)."
                        ) from None
                    self.results.write_run(record)
                    display.finished(record)
        except BaseException:
            _terminate_workers(pool)  # at once: Ctrl-C or a failure must not wait for runs in progress
            raise
        pool.shutdown()


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
