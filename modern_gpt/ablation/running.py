"""Running an ablation: its jobs, one run (execute), and the ablation bound to its results folder.

start() and resume() check the corpus and the folder, and return an Ablation. Ablation.run() trains the pending
runs on an executor (ablation/executors/), a round of seeds at a time with --seeds auto. It writes each finished
run at once, atomically. meta.json, runs/, runs.csv and curves.csv are written here, by the driver, never by a
worker. report.py then writes summary.csv from them, and plot.py the figures. Runs are written seed by seed,
so an interrupted ablation has complete pairs and resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import platform
import time
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path

import torch

from .. import __version__
from ..core.components import PluginError
from ..core.config import AblationOptions, DataConfig, ModelConfig, TrainConfig, param_counts
from ..core.errors import UserError
from ..core.files import git_state, write_json
from ..core.settings import Settings
from ..data.corpus import Corpus, changed, check_length, eval_offsets, load_corpus
from ..model import plugins
from ..run import compiling
from ..run.train import RunResult, check_memory, is_oom, pin_threads, train_run
from ..trackers.records import tracking_state
from ..trackers.tracking import Tracking
from .executors import Detached, Executor, executor_class, resume_options
from .margins import margins
from .planning import Spec, Variant, variant_config, variant_info
from .results import FORMAT, ResultsDir, Scan, settings_hash


def environment(device: str, device_name: str | None = None) -> dict:
    """The versions and the device. device_name: on Ray, the workers' (this machine may have no GPU)."""
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
        "device_name": device_name
        or (torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()),
        **dict(zip(("git_commit", "git_dirty"), git_state(), strict=True)),  # the checkout that trained, if any
    }


def now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class Job:
    row: int
    variant: Variant
    seed: int
    model: ModelConfig
    train: TrainConfig
    data: DataConfig
    threads: int
    plugins: tuple[tuple[str, str, str], ...] = ()  # (path, source, package) of each plugin the model uses: by value

    def __call__(self, corpus: Corpus, on_step=None) -> dict:
        """What an executor calls, in whichever process it runs the job."""
        return execute(self, corpus, on_step)

    def settings_hash(self, corpus: Corpus) -> str:
        """The settings hash its run file carries (results.settings_hash), which --resume and Slurm compare."""
        return settings_hash(Settings(self.model, self.train, self.data).to_dict(), corpus.key)

    def failure_record(self, corpus: Corpus, error: str) -> dict:
        """The record of this run when it could not finish, its worker dead on every try: a failed run."""
        cfg = variant_config(self.model, self.variant)
        return _identified(self, cfg, corpus, _failed_record(self, cfg, corpus, error))


def execute(job: Job, corpus: Corpus, on_step=None) -> dict:
    """One run as a results record, on the corpus the driver loaded and hashed. It is never read again here, so
    every run trains on the tokens meta.json's data_key names. on_step(row, seed, step, loss) follows its progress.
    Running out of memory, even before the first step, is a recorded failure, not an exception. So is any error,
    or sys.exit, of a row with a plugin component (run_error)."""
    progress = None if on_step is None else lambda step, loss: on_step(job.row, job.seed, step, loss)
    plugins.install_all(job.plugins)  # a worker (or Ray node) runs the plugin's source it was sent
    cfg = variant_config(job.model, job.variant)
    try:
        init = "placebo" if job.variant.placebo else "init"
        pin_threads(job.train, job.threads)  # before the guard, which then sees only the plugin's changes
        with plugins.guarded_run(cfg):
            result, _ = train_run(cfg, corpus, job.train, job.seed, progress, job.threads, init=init)
        record = result.to_dict()
    except (Exception, SystemExit) as e:  # not Ctrl-C
        why = run_error(e, cfg)
        if why is None:
            raise
        record = _failed_record(job, cfg, corpus, why)
    return _identified(job, cfg, corpus, record)


def run_error(e: BaseException, cfg: ModelConfig) -> str | None:
    """The record's error of a run that raised e, or None when e is no run's outcome: a defect, raised again,
    and the ablation ends. A row with a plugin component owns what it raises, sys.exit too. That holds in the
    plugin's forward or in a backward, whose frames are torch's alone. It is that run's error; the ablation goes on."""
    if isinstance(e, PluginError):  # guarded_run's: it names the plugin and what it changed
        return str(e)
    text = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}".rstrip(": ")
    plugin = plugins.raised_in(e)
    if plugin:
        return f"the plugin {plugin} raised {text}"
    if isinstance(e, (RuntimeError, MemoryError)) and is_oom(e):
        return f"out of memory before training: {(str(e).splitlines() or [type(e).__name__])[0]}"
    if cfg.extra_components:
        return f"training with the plugin {plugins.files_of(cfg)} raised {text}"
    return None


def _identified(job: Job, cfg: ModelConfig, corpus: Corpus, record: dict) -> dict:
    """A run's record with its identity: row, variant, components, MLP width, and its settings' hash."""
    record.update(
        row=job.row,
        variant=job.variant.name,
        components="+".join(job.variant.components),
        mlp_width=cfg.mlp_width,
        vocab_size=corpus.tokenizer.vocab_size,  # the model's (the settings' vocab_size is a default)
        lr=job.train.lr,
        compile=job.train.compile,
        settings_hash=job.settings_hash(corpus),
    )
    return record


def _failed_record(job: Job, cfg: ModelConfig, corpus: Corpus, error: str) -> dict:
    params = param_counts(replace(cfg, vocab_size=corpus.tokenizer.vocab_size))["total"]
    return RunResult.failed(job.seed, params, job.threads, job.train.device, corpus.lossless, error).to_dict()


def default_folder(plan: str) -> Path:
    base = Path("results") / f"{time.strftime('%Y%m%d-%H%M%S')}-{plan}"
    folder, n = base, 2
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder


def start(spec: Spec, out: Path | None, command: str, options: AblationOptions | None = None) -> Ablation:
    """A new ablation: the corpus checked, the executor ready (a Ray cluster connected), the results folder
    created with its meta.json. options: where the runs train; its seeds and statistics are the spec's."""
    options = options or AblationOptions()
    device = _device(spec, options)
    corpus = load_corpus(spec.settings.data)
    check_length(corpus, spec.settings.model.context)
    context, eval_tokens = spec.settings.model.context, spec.settings.train.eval_tokens
    if spec.lrs and len(eval_offsets(len(corpus.val), context, eval_tokens)) < 2:
        where = (
            f"--eval-tokens {eval_tokens} makes one window of --context {context}; give at least {2 * context}"
            if eval_tokens < 2 * context
            else f"{corpus.name}'s validation split holds one window of --context {context}; use more text or a "
            "smaller --context"
        )
        raise UserError(f"--lrs chooses on half the evaluation windows and reports on the other half, but {where}.")
    for v in spec.variants:  # a size that cannot fit is refused before anything is written
        cfg = replace(variant_config(spec.settings.model, v), vocab_size=corpus.tokenizer.vocab_size)
        plugins.check_forward(cfg)  # a plugin's factory or output shape, on two tokens, before any folder
        if executor_class(options.execution).local_memory:  # else each run checks its own node's memory (train_run)
            check_memory(cfg, spec.settings.train, device)
    spec.data_key, spec.data_name = corpus.key, corpus.name
    results = ResultsDir(out or default_folder(spec.plan))
    results.check_new()
    ablation = Ablation(spec, results, {}, corpus, options)  # an unreachable cluster is refused before the folder
    try:
        threads = ablation.run_threads()
        compile_ = _choose_compile(spec, corpus, device, threads)
        ablation.meta = {
            "format": FORMAT,  # meta.json's layout (results.check_format)
            "command": command,
            "spec": spec.to_dict(),
            "variants": variant_info(spec, corpus.tokenizer.vocab_size),
            "corpus": corpus.facts(),  # what --resume names when the data or the tokenizer file changed
            "plugins": plugins.records(variant_config(spec.settings.model, v) for v in spec.variants),
            "loaded_plugins": loaded_plugins(None),  # every one, used or not
            "jobs": options.execution.jobs,
            "threads": threads,  # every run's torch threads, a resume's too (CPU values depend on them)
            "compile": compile_,
            "executor": ablation.executor.info(),
            **environment(device, ablation.executor.device_name()),
            "started": now(),
            "finished": None,
            "status": "running",
        }
        results.create(ablation.meta)
    except BaseException:
        ablation.executor.close()
        raise
    return ablation


def resume(folder: Path, options: AblationOptions | None = None) -> Ablation:
    """An interrupted ablation, with its own settings. The flags given with --resume are checked against them
    first (planning.check_resume). Any executor finishes a folder any executor started: the executor decides
    where runs train, not their numbers."""
    options = options or AblationOptions()
    results = ResultsDir(folder)
    meta = results.read_meta()
    owner = results.owner()
    if owner is not None:  # before the corpus is loaded: say it at once
        raise UserError(
            f"{folder} is being written by another modern-gpt process (pid {owner or 'not yet written'}); "
            "wait for it to finish or stop it first."
        )
    plugins.check_recorded(meta.get("plugins"), folder)
    # a Slurm folder's tasks may still be training its runs
    options = replace(options, execution=resume_options(meta, folder, options.execution))
    spec = results.spec
    corpus = load_corpus(spec.settings.data)
    if corpus.key != spec.data_key:
        what = changed(spec.settings.data, meta.get("corpus"), corpus.hashes)
        raise UserError(
            f"{folder}: {what} changed since the ablation started; put back the original, or start a new one."
        )
    _check_eval_sets(folder, meta.get("corpus"), corpus)
    _device(spec, options)
    meta["resumed"] = [*meta.get("resumed", []), now()]
    meta["loaded_plugins"] = loaded_plugins(meta.get("loaded_plugins"))
    if meta.get("threads") is None:  # a folder from before threads were pinned: those its first run trained with
        meta["threads"] = first_threads(results.finished())
    ablation = Ablation(spec, results, meta, corpus, options)
    meta["threads"] = ablation.run_threads()
    meta["executor"] = ablation.executor.info()
    return ablation


def _check_eval_sets(folder: Path, kept, corpus: Corpus) -> None:
    """An --eval-data set whose contents changed since the ablation started is refused, as the corpus is.
    Its runs would be measured on two sets under one name."""
    was = (kept or {}).get("eval_sets") if isinstance(kept, dict) else None
    for s in corpus.evals:
        before = was.get(s.name) if isinstance(was, dict) else None
        if isinstance(before, dict) and before.get("sha256") != s.sha256:
            raise UserError(
                f"{folder}: the evaluation set {s.name} ({s.path}) changed since the ablation started; put back the "
                "original, or start a new one."
            )


def loaded_plugins(recorded) -> list[dict]:
    """meta.json's loaded_plugins: every plugin the driver loaded, at the start and each resume, used or not.
    meta.json's plugins are those the rows use, which a resume needs. A folder from before the key gains it at its
    next resume. One no row uses is recorded, not required. plugins.py refuses a plugin that changes the process
    its runs train in, so its absence changes no run."""
    kept = [r for r in recorded if isinstance(r, dict)] if isinstance(recorded, list) else []
    seen = {r.get("sha256") for r in kept}
    return kept + [r for r in plugins.loaded_records() if r["sha256"] not in seen]


def _choose_compile(spec: Spec, corpus: Corpus, device: str, threads: int) -> dict:
    """--compile auto, decided once on the driver for every run (compiling.decide), into the spec's settings.
    So every row trains alike, and meta.json and --resume keep the choice."""
    seeds = spec.min_seeds if spec.sequential else len(spec.seeds)  # --seeds auto: its first round, at least
    vocab = corpus.tokenizer.vocab_size
    models = [replace(variant_config(spec.settings.model, v), vocab_size=vocab) for v in spec.variants] * seeds
    choice, why = compiling.decide(models, spec.settings.train, device, threads)
    spec.settings = replace(spec.settings, train=replace(spec.settings.train, compile=choice))
    return {"choice": choice, "why": why}


def first_threads(finished: dict[tuple[int, int], dict]) -> int | None:
    """The torch threads of a folder's first finished run (seed-major, as runs start), or None with none."""
    for key in sorted(finished, key=lambda rs: (rs[1], rs[0])):
        threads = finished[key].get("threads")
        if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
            return threads
    return None


def _device(spec: Spec, options: AblationOptions) -> str:
    """The device the runs train on, as the executor reads --device (on Ray, the workers')."""
    return executor_class(options.execution).device_of(spec.settings.train.device, options.execution)


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
    corpus: Corpus | None = None  # loaded and hashed by the driver: the tokens every run trains on
    options: AblationOptions = field(default_factory=AblationOptions)  # where the runs train, and the trackers
    executor: Executor = field(init=False)  # made with the ablation (a Ray cluster connected), closed at its end
    tracking: Tracking | None = field(init=False, default=None)  # --track: opened by run(), closed by finish_tracking()
    records: dict | None = field(init=False, default=None)  # the finished runs: read from runs/ once, by run()

    def __post_init__(self) -> None:
        device = _device(self.spec, self.options)
        execution = self.options.execution
        self.executor = executor_class(execution)(execution, self.run_threads(), device)
        bind = getattr(self.executor, "bind", None)  # an executor that needs the plan and the folder (Slurm)
        if bind is not None:
            try:
                bind(self)
            except BaseException:
                self.executor.close()
                raise

    @property
    def total(self) -> int:
        """The runs planned so far: every variant x seed. With --seeds auto, those of the rounds begun."""
        seeds = len(self.spec.seeds)
        if self.spec.sequential:
            seq = self.meta.get("sequential") or {}
            looks = seq.get("looks") or []
            seeds = min(seeds, looks[-1]["seeds"] + (not seq.get("stopped")) if looks else self.spec.min_seeds)
        return len(self.spec.variants) * seeds

    def pending(self, seeds: int | None = None) -> list[Job]:
        """The runs not finished yet, among the first `seeds` seeds (all of them by default)."""
        done = self.finished()
        s = self.spec.settings
        threads = self.run_threads()
        return [
            Job(
                row,
                v,
                seed,
                s.model,
                s.train if v.lr is None else replace(s.train, lr=v.lr),
                s.data,
                threads,
                plugins.jobs_plugins(variant_config(s.model, v)),
            )
            for seed in self.spec.seeds[:seeds]  # seed-major: an interrupted ablation leaves complete pairs
            for row, v in enumerate(self.spec.variants)
            if (row, seed) not in done
        ]

    def scan(self) -> Scan:
        """The finished runs as a Scan (what report reads), from memory."""
        return Scan(self.finished(), variants=self.spec.variants)

    def finished(self) -> dict[tuple[int, int], dict]:
        """The finished runs keyed (row, seed). runs/ is read once, then each run added as it is written."""
        if self.records is None:
            self.records = self.results.finished()
        return self.records

    def run_threads(self) -> int:
        """Torch threads per run, pinned by the folder's first run (meta.json's threads). A resume with another
        --jobs, executor or machine trains with the same threads. CPU results depend on them (about 1e-7 apart
        otherwise). A new folder: --threads, else _auto_threads."""
        return self.meta.get("threads") or self.spec.settings.train.threads or self._auto_threads()

    def _auto_threads(self) -> int:
        """Torch threads per run when --threads is not set: the executor's choice (Executor.threads)."""
        execution = self.options.execution
        return executor_class(execution).threads(execution, _device(self.spec, self.options))

    def _run_jobs(self, jobs: list[Job], display) -> None:
        def on_record(record: dict) -> None:  # in this process: the only writer of the folder
            self.results.write_run(record, self.finished())
            self._track(record)
            display.finished(record)

        if jobs:
            display.at_once = self.executor.at_once(len(jobs))  # for the time estimate after the first run
            self.executor.run(jobs, self.corpus, display.step, on_record)

    def _open_tracking(self) -> None:
        """--track: the trackers opened on this folder, and asked for in meta.json's tracking. The report's
        footnote counts the runs each lacks. A resume with other trackers keeps the earlier ones' entries."""
        if not self.options.tracking.track or self.tracking is not None:
            return
        chosen = self.options.tracking
        self.tracking = Tracking.open(chosen.track, chosen.mlflow_uri, self.results.path, self.meta)
        self.meta["tracking"] = {**tracking_state(self.meta), **self.tracking.state(chosen.track)}

    def _track(self, record: dict) -> None:
        """Log a finished run, already written, to the trackers, then add their ids to its file. A kill between the
        two leaves the run in the folder; the tracker's copy is replaced when it is logged again."""
        if self.tracking is None:
            return
        errors = dict(self.tracking.errors)
        ids = self.tracking.log(record)
        if ids:
            record["tracked"] = ids
            write_json(self.results.run_file(record["row"], record["seed"]), record)
        if self.tracking.errors != errors:  # a tracker failed: meta.json says so (the report's footnote)
            self.meta["tracking"].update(self.tracking.state(self.tracking.errors))
            self.results.write_meta(self.meta)

    def finish_tracking(self, summary: list | None) -> None:
        """After the report's files are written: the summary rows to the trackers, then closed. None: no summary,
        after Ctrl-C. A tracker that failed on the way is recorded in meta.json."""
        if self.tracking is None:
            return
        try:
            if summary is not None:
                self.tracking.finish(self.results.path, summary, margins(self.results))
                for name in self.tracking.names:  # still open: it holds the summary (report --track logs it not again)
                    self.meta["tracking"][name]["summary"] = True
        finally:
            self.tracking.close()
            self.meta["tracking"].update(self.tracking.state(self.tracking.errors))
            with contextlib.suppress(UserError):  # another process took the folder meanwhile: its meta.json wins
                self.results.lock()
                try:
                    self.results.write_meta(self.meta)
                finally:
                    self.results.unlock()
            self.tracking = None

    def _start_looks(self) -> None:
        """With --seeds auto, the boundary and the (empty) list of looks go into meta.json before the first run.
        So a report of a folder stopped in its first round judges by the boundary."""
        bound = self.spec.boundary()
        if bound is not None:  # recorded for the reader; report recomputes it from the spec and compares
            self.meta["sequential"] = {
                "min_seeds": self.spec.min_seeds,
                "max_seeds": len(self.spec.seeds),
                "method": bound.method,
                "levels": list(bound.levels[-1]),
                "looks": [],
                "stopped": False,
            }

    def _run_rounds(self, display) -> None:
        """Every pending run: all seeds at once, or with --seeds auto a round at a time (docs/statistics.md).
        Every row is tested after each round. Rounds stop once every row is decided or futile, or at --max-seeds.
        On --resume the looks are recomputed from the finished runs: a resumed ablation stops where the first would."""
        from ..verdict.table import take_look  # the verdicts, computed as the table computes them
        from .report import design_of

        rows, seq = len(self.spec.variants), self.meta.get("sequential")
        n = self.spec.min_seeds if self.spec.sequential else len(self.spec.seeds)
        while True:
            jobs = self.pending(n)
            display.start(rows * n, rows * n - len(jobs))
            self._run_jobs(jobs, display)
            if not self.spec.sequential:
                return
            design = design_of(self.meta, self.spec, self.results.path)
            look, stop = take_look(design, self.scan().runs(), n)
            seq["looks"].append({**look, "at": now()})
            seq["stopped"] = stop or n >= len(self.spec.seeds)
            self.results.write_meta(self.meta)
            if seq["stopped"]:
                return
            n += 1

    def run(self, display) -> None:
        """Run every pending job and write each finished run at once. Ctrl-C keeps them and marks the folder.
        display: start(total, done), step(row, seed, step, loss), finished(record)."""
        try:
            self.results.lock()
        except BaseException:
            self.executor.close()
            raise
        try:
            self.meta.update(status="running")
            self._start_looks()
            self._open_tracking()
            self.results.write_meta(self.meta)
            # on resume, the CSVs are rebuilt from runs/, whatever befell them (read here, once)
            self.records = self.results.finished()
            self.results.write_tables(self.records)
            self._run_rounds(display)
            self.meta.update(status="finished", finished=now())
        except BaseException as e:  # the folder tells the truth: interrupted, detached, or failed and why
            if isinstance(e, Detached):  # its runs go on without this process; a resume collects them
                self.meta.update(status="detached", detached=now())
            elif isinstance(e, KeyboardInterrupt):
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
            self.executor.close()
