"""The ablation harness: plans of variants, paired seeds, parallel runs, resume.

Every variant runs with every seed on the same corpus; a seed fixes the batch order
and the evaluation windows, so the per-seed differences between two rows are paired.
Runs are written to the results folder as they finish, seed by seed, so that an
interrupted ablation has complete pairs and resumes where it stopped.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import platform
import queue
import signal
import subprocess
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import torch

from . import __version__
from .data import DataConfig, check_length, load_corpus
from .errors import UserError
from .model import COMPONENTS, ModelConfig, kv_cache_bytes_per_token, non_embedding_params, param_counts
from .results import ResultsDir
from .settings import Settings, from_dict
from .train import TrainConfig, default_threads, resolve_device, train_run

PLANS = ("cumulative", "single", "leave-one-out", "custom", "duel")
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
    if plan == "duel":  # the two complete architectures: GPT-2 against a Llama-style model
        return [Variant("classic", (), None), Variant("modern", COMPONENTS, 0)]
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


_events = None  # in a worker process: the queue its progress goes to


def _worker_init(events) -> None:
    global _events
    _events = events
    # Ctrl-C reaches every process of the terminal; the parent alone decides, and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _execute_in_worker(job: Job) -> dict:
    last = [0.0]

    def on_step(row: int, seed: int, step: int, loss: float) -> None:
        if time.monotonic() - last[0] > 0.2:  # a few updates a second are enough for a display
            last[0] = time.monotonic()
            _events.put((row, seed, step, loss))

    return execute(job, on_step)


def plan_spec(
    settings: Settings,
    plan: str,
    components: str | None = None,
    variants: str | None = None,
    seeds: int | None = None,
    seed_list_text: str | None = None,
    match: bool = False,
) -> Spec:
    """The specification of a new ablation from the command line's choices."""
    rows = make_plan(plan, parse_components(components), variants)
    if match:
        rows = match_params(rows, settings.model)
    return Spec(settings, plan, rows, seed_list(seeds, seed_list_text), match)


def check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}.")


def default_folder(plan: str) -> Path:
    base = Path("results") / f"{time.strftime('%Y%m%d-%H%M%S')}-{plan}"
    folder, n = base, 2
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder


def start(spec: Spec, out: Path | None, jobs: int, command: str) -> Ablation:
    """A new ablation: the corpus checked, the results folder created with its meta.json."""
    check_jobs(jobs)
    device = resolve_device(spec.settings.train.device)
    corpus = load_corpus(spec.settings.data)
    check_length(corpus, spec.settings.model.context)
    spec.data_key, spec.data_name = corpus.key, corpus.name
    results = ResultsDir(out or default_folder(spec.plan))
    if results.path.exists() and (not results.path.is_dir() or any(results.path.iterdir())):
        raise UserError(
            f"{results.path} already exists and is not an empty folder; choose another --out, or --resume it."
        )
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
    return Ablation(spec, results, meta, jobs)


def resume(folder: Path, requested: Spec | None, jobs: int) -> Ablation:
    """An interrupted ablation, with its own settings; `requested` (when flags were given) must match them."""
    check_jobs(jobs)
    results = ResultsDir(folder)
    meta = results.read_meta()
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
    return Ablation(spec, results, meta, jobs)


@dataclass
class Ablation:
    """An ablation bound to its results folder."""

    spec: Spec
    results: ResultsDir
    meta: dict
    jobs: int = 1

    @property
    def total(self) -> int:
        return len(self.spec.variants) * len(self.spec.seeds)

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
        """Run every pending job and write each finished run at once; Ctrl-C keeps them and marks the folder.
        display: start(total, done), step(row, seed, step, loss), finished(record)."""
        self.results.lock()
        try:
            self.meta.update(status="running")
            self.results.write_meta(self.meta)
            # on resume, the CSVs are rebuilt from runs/, whatever befell them
            self.results.write_tables(self.results.finished())
            jobs = self.pending()
            display.start(self.total, self.total - len(jobs))
            if self.jobs <= 1:
                for job in jobs:
                    record = execute(job, display.step)
                    self.results.write_run(record)
                    display.finished(record)
            else:
                self._run_parallel(jobs, display)
            self.meta.update(status="finished", finished=now())
        except KeyboardInterrupt:
            self.meta.update(status="interrupted", interrupted=now())
            raise
        finally:
            self.results.write_meta(self.meta)
            self.results.unlock()

    def _run_parallel(self, jobs: list[Job], display) -> None:
        ctx = mp.get_context("spawn")  # fork after torch has started its threads can deadlock
        events = ctx.Queue()
        # Leaving the with block (at the end, or on Ctrl-C) terminates the workers at once.
        with ctx.Pool(self.jobs, initializer=_worker_init, initargs=(events,)) as pool:
            waiting = [pool.apply_async(_execute_in_worker, (job,)) for job in jobs]
            while waiting:
                time.sleep(0.05)
                while True:
                    try:
                        display.step(*events.get_nowait())
                    except queue.Empty:
                        break
                for handle in [h for h in waiting if h.ready()]:
                    waiting.remove(handle)
                    record = handle.get()  # a worker's exception is raised here
                    self.results.write_run(record)
                    display.finished(record)
