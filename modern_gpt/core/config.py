"""The settings dataclasses, and a model's price by arithmetic alone.

ModelConfig, TrainConfig and DataConfig are a run's settings; AblationOptions are an ablation's. Each field
carries its default and its help (errors.setting). That help is the one source of its flag, its TOML key and
docs/settings.md's tables (settings.py). Each dataclass checks its values when it is made. param_counts and
kv_cache_bytes_per_token read a ModelConfig, or explain's Shapes of a config.json, without building a model.
Torch-free on purpose: `modern-gpt --help`, an argument error and `params` never wait for torch.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .components import BUILT_COUNTS, COMPONENTS, PLUGINS, SLOTS, component_problem
from .errors import ConfigError, setting


# ---------------------------------------------------------------------------
# The model: one field per component (False is GPT-2's piece, True the modern
# one, built in model/gpt.py), the shape, and the checks that every shape must pass.
# ---------------------------------------------------------------------------
@dataclass
class ModelConfig:
    # Each help is the one source of the flag's help and docs/settings.md's settings table (see settings.py).
    vocab_size: int = setting(256, "vocabulary size (training sets it from the tokenizer: only params has this flag)")
    context: int = setting(128, "tokens per window: the context length the model trains on")
    dim: int = setting(128, "width of the residual stream (GPT-2's n_embd)")
    heads: int = setting(4, "query heads per attention layer")
    layers: int = setting(4, "transformer blocks")
    dropout: float = setting(0.0, "dropout probability on embeddings, attention and residual outputs")
    # The components (see COMPONENTS); their help is their COMPONENT_SUMMARY line.
    rmsnorm: bool = False
    rope: bool = False
    swiglu: bool = False
    no_bias: bool = False
    gqa: bool = False
    qk_norm: bool = False
    kv_heads: int | None = setting(None, "key/value heads when --gqa is on (unset: heads // 2)")
    rope_base: float = setting(10000.0, "RoPE's base frequency (theta)")
    multiple_of: int = setting(8, "SwiGLU's hidden width is rounded up to a multiple of this")
    mlp_hidden: int | None = setting(None, "explicit MLP hidden width, overriding 4*dim and the SwiGLU rule")
    tie_embeddings: bool = setting(True, "share the token embedding with the output layer")
    # The plugin components switched on (components.PLUGINS; --plugin FILE loads them): not a flag of its own.
    extra_components: tuple[str, ...] = field(default=(), metadata={"setting": False})

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        self.extra_components = tuple(self.extra_components)
        self._check_plugins()
        for name in ("vocab_size", "context", "dim", "heads", "layers", "multiple_of"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}.")
        if self.mlp_hidden is not None and self.mlp_hidden < 1:
            raise ConfigError(f"mlp_hidden must be at least 1, got {self.mlp_hidden}.")
        if not 1 < self.rope_base < math.inf:
            raise ConfigError(f"rope_base must be a finite number greater than 1, got {self.rope_base}.")
        if self.dim % self.heads:
            raise ConfigError(
                f"dim {self.dim} is not divisible by {self.heads} heads: every head needs an equal share of dim."
            )
        if self.gqa:
            if self.n_kv_heads < 1:
                raise ConfigError(
                    f"kv_heads must be at least 1, got {self.n_kv_heads}"
                    + (f" (the default is heads // 2 = {self.heads} // 2)." if self.kv_heads is None else ".")
                )
            if self.heads % self.n_kv_heads:
                raise ConfigError(
                    f"{self.heads} heads with {self.n_kv_heads} KV heads: {self.heads} is not divisible by {self.n_kv_heads}."
                )
        if self.rope and self.head_dim % 2:
            raise ConfigError(
                f"rope needs an even head dimension, but dim {self.dim} / {self.heads} heads = {self.head_dim}."
            )

    def _check_plugins(self) -> None:
        """Each plugin component is loaded and alone in its slot. A built-in that is on fills it too (two MLPs)."""
        taken = {slot: builtin for slot, builtin in SLOTS.items() if builtin and getattr(self, builtin)}
        for name in self.extra_components:
            if name not in PLUGINS:
                raise ConfigError(f"component {name!r} comes from a plugin that is not loaded; give its --plugin FILE.")
            slot = PLUGINS[name].slot
            if slot in taken:
                raise ConfigError(
                    f"{name} and {taken[slot]} both fill the model's {slot}, and a model has one; switch one off."
                )
            taken[slot] = name

    @property
    def bias(self) -> bool:
        """Whether every Linear layer but the output head, and every LayerNorm, has a bias. no_bias removes them."""
        return not self.no_bias

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def n_kv_heads(self) -> int:
        if not self.gqa:
            return self.heads
        return self.heads // 2 if self.kv_heads is None else self.kv_heads

    @property
    def mlp_width(self) -> int:
        """The MLP's hidden width: --mlp-hidden outright, else 4*dim or SwiGLU's rule."""
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if not self.swiglu:
            return 4 * self.dim
        # SwiGLU has three matrices instead of two, so 2/3 of the width keeps the cost equal.
        hidden = int(2 * 4 * self.dim / 3)
        return self.multiple_of * math.ceil(hidden / self.multiple_of)

    @property
    def components(self) -> tuple[str, ...]:
        return (*(c for c in COMPONENTS if getattr(self, c)), *self.extra_components)

    def with_components(self, components) -> ModelConfig:
        """The same settings with exactly these components switched on."""
        why = component_problem(components)
        if why:
            raise ConfigError(f"{why}.")
        extra = tuple(c for c in PLUGINS if c in components)
        return replace(self, **{c: c in components for c in COMPONENTS}, extra_components=extra)

    def to_dict(self) -> dict:
        d = asdict(self)
        if not d["extra_components"]:  # a model without plugins saves (and hashes) as before they existed
            del d["extra_components"]
        else:
            d["extra_components"] = list(d["extra_components"])
        return d


# ---------------------------------------------------------------------------
# The price of each piece: parameters and KV-cache bytes, by arithmetic alone.
# These are the only formulas: explain feeds them the shapes of a config.json.
# ---------------------------------------------------------------------------
# The pieces a parameter count is split into (see param_counts).
PIECES = ("token_embedding", "position_table", "attention", "mlp", "norms", "biases", "output_head")


@dataclass(frozen=True)
class Shapes:
    """Everything a parameter count depends on: the one description that param_counts reads.

    modern-gpt's own models fill it from a ModelConfig (Shapes.of). `explain` fills it from a
    Hugging Face config.json. That may have biases on some projections only, or a head_dim that
    is not dim / heads. It may have QK-norm gains over the whole projection (OLMo-2).
    """

    vocab_size: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp_width: int  # the MLP's hidden width
    mlp_matrices: int  # 2 (classic) or 3 (gated: SwiGLU, GeGLU)
    position_rows: int  # rows of a learned position table; 0 with RoPE
    qk_norm_gains: int  # QK-norm gains per layer: 0, 2 * head_dim (per head), or (heads + kv_heads) * head_dim (OLMo-2)
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    norm_shift: bool  # LayerNorm's bias
    tied: bool
    norms_per_layer: int = 2  # Gemma-2 and -3 norm before and after attention and MLP: 4; StableLM in parallel: 1
    act_params: int = 0  # learned parameters of the MLP's activation per layer (Apertus's xIELU: 2)

    @classmethod
    def of(cls, cfg: ModelConfig) -> Shapes:
        return cls(
            vocab_size=cfg.vocab_size,
            dim=cfg.dim,
            layers=cfg.layers,
            heads=cfg.heads,
            kv_heads=cfg.n_kv_heads,
            head_dim=cfg.head_dim,
            mlp_width=cfg.mlp_width,
            mlp_matrices=3 if cfg.swiglu else 2,
            position_rows=0 if cfg.rope else cfg.context,
            qk_norm_gains=2 * cfg.head_dim if cfg.qk_norm else 0,
            qkv_bias=cfg.bias,
            o_bias=cfg.bias,
            mlp_bias=cfg.bias,
            norm_shift=cfg.bias and not cfg.rmsnorm,
            tied=cfg.tie_embeddings,
        )


def param_counts(cfg: ModelConfig | Shapes) -> dict[str, int]:
    """Parameters per piece (see PIECES) and their total, from the settings alone.

    Arithmetic rather than a built model, so it costs nothing at any size, a 70B model's
    config.json included. tests/model/test_model.py checks it against a real GPT's parameters,
    for every variant.
    """
    if isinstance(cfg, ModelConfig) and cfg.extra_components:  # no formula for your own piece: count it built
        return BUILT_COUNTS[0](cfg)
    s = cfg if isinstance(cfg, Shapes) else Shapes.of(cfg)
    d, L = s.dim, s.layers
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim  # widths of the query and of the key (or value) projection
    counts = {
        "token_embedding": s.vocab_size * d,
        "position_table": s.position_rows * d,
        "attention": L * (d * (q + 2 * kv) + q * d),
        "mlp": L * (s.mlp_matrices * d * s.mlp_width + s.act_params),
        "norms": (s.norms_per_layer * L + 1) * d + L * s.qk_norm_gains,  # gains; RMSNorm has no shift
        "biases": 0,
        "output_head": 0 if s.tied else s.vocab_size * d,
    }
    counts["biases"] = (
        L * ((q + 2 * kv) * s.qkv_bias + d * s.o_bias + ((s.mlp_matrices - 1) * s.mlp_width + d) * s.mlp_bias)
        + (s.norms_per_layer * L + 1) * d * s.norm_shift  # LayerNorm's shift
    )
    counts["total"] = sum(counts.values())
    return counts


def non_embedding_params(counts: dict[str, int]) -> int:
    """The parameters of the transformer body: what --match-params equalises."""
    return counts["total"] - counts["token_embedding"] - counts["position_table"] - counts["output_head"]


def kv_cache_bytes_per_token(cfg: ModelConfig | Shapes, bytes_per_value: int = 2) -> int:
    """Bytes a KV cache holds per token when serving: keys and values, every layer. At bf16 by default."""
    s = cfg if isinstance(cfg, Shapes) else Shapes.of(cfg)
    return 2 * s.layers * s.kv_heads * s.head_dim * bytes_per_value


# ---------------------------------------------------------------------------
# Training: the optimizer, its schedule, the evaluations and where a run trains.
# ---------------------------------------------------------------------------
DEVICES = ("auto", "cpu", "cuda", "mps")
SPIKE = 1.0  # nats: a training loss this far above its running minimum, after warm-up, is a loss spike


@dataclass
class TrainConfig:
    # Each help is the one source of the flag's help and docs/settings.md's settings table (see settings.py).
    steps: int = setting(500, "optimizer steps per run")
    batch_size: int = setting(16, "windows per step")
    lr: float = setting(1e-3, "peak learning rate")
    min_lr_ratio: float = setting(0.1, "the cosine schedule ends at this fraction of the peak")
    warmup_steps: int = setting(50, "linear warmup steps")
    weight_decay: float = setting(0.1, "AdamW weight decay, on matrices only")  # not on biases, norms or gains
    beta1: float = setting(0.9, "AdamW beta1")
    beta2: float = setting(0.95, "AdamW beta2")
    grad_clip: float = setting(1.0, "clip the gradient norm at this value (0: no clipping)")
    eval_every: int = setting(100, "evaluate every N steps (and at the end)")
    eval_batches: int = setting(8, "intermediate evaluations use this many batches of the fixed windows")
    # 65,536: the loss's sd across disjoint sets of this size was about 0.004-0.005 nats, a delta's about 0.004,
    # on tinyshakespeare (docs/measurements.md); 262,144 cost 3x the final evaluation for about half that sd.
    eval_tokens: int = setting(
        65_536,
        "the final loss is measured on the whole split, or on this many tokens of fixed, evenly spaced windows "
        "(65,536 measure a loss to an sd of about 0.005 nats)",
    )
    device: str = setting("auto", "auto | cpu | cuda | mps (auto: cuda, then mps, then cpu)")
    compile: str | bool = setting(  # true and false: an older folder's or TOML file's, read as on and off
        "auto",
        "auto | on | off: torch.compile the training step; auto compiles when the ablation's runs are long enough "
        "that the measured time it saves per step repays its compile time (one choice for every row)",
    )
    threads: int = setting(0, "torch threads per run (0: the cores, divided among --jobs)")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_batches", "eval_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError(f"lr must be a positive number, got {self.lr}.")
        for name in ("warmup_steps", "threads"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}.")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio must be between 0 and 1, got {self.min_lr_ratio}.")
        for name in ("weight_decay", "grad_clip"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ConfigError(f"{name} must be a finite number of 0 or more, got {getattr(self, name)}.")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ConfigError(f"beta1 and beta2 must be in [0, 1), got {self.beta1} and {self.beta2}.")
        if self.device not in DEVICES:
            raise ConfigError(f"unknown device {self.device!r}; choose one of {', '.join(DEVICES)}.")
        self.compile = compile_choice(self.compile)


COMPILE_CHOICES = ("auto", "on", "off")


def compile_choice(value: str | bool) -> str:
    """--compile's value as auto, on or off. True and false, from before auto existed, are on and off."""
    if isinstance(value, bool):
        return "on" if value else "off"
    choice = value.strip().lower() if isinstance(value, str) else value
    if choice not in COMPILE_CHOICES:
        raise ConfigError(f"--compile must be auto, on or off, got {value!r}.")
    return choice


# ---------------------------------------------------------------------------
# Data: the corpus, its tokenizer and the validation split.
# ---------------------------------------------------------------------------
TOKENIZERS = ("char", "byte", "bpe")  # or the path of a pretrained Hugging Face tokenizer.json


def lossy_note(tokenizer: str, lost: int | None, chars: int | None) -> str:
    """The one sentence for a tokenizer that does not give back the validation text. It is train's note and the
    report's footnote."""
    share = ""
    if lost and chars:  # a share too small for one decimal keeps two significant digits (0.0033%, not 0.0%)
        pct = 100 * lost / chars
        share = f" in {lost:,} of its {chars:,} characters, " + (f"{pct:.1f}%" if pct >= 0.1 else f"{pct:.2g}%")
    return (
        f"Lossy tokenizer: --tokenizer {tokenizer} does not give back the validation text (decode(encode(text)) "
        f"differs{share}): its bits/char count only what it keeps, and compare with no other tokenizer's."
    )


BUILT_IN_CORPUS = "tinyshakespeare"  # --data's one built-in name: the whole public-domain text the package ships


def built_in(path: str) -> bool:
    """Whether --data names the built-in corpus. A file or folder of that name comes first."""
    return path == BUILT_IN_CORPUS and not os.path.lexists(path)


@dataclass
class DataConfig:
    # Each help is the one source of the flag's help and docs/settings.md's settings table (see settings.py).
    path: str = setting(
        "",
        "a .txt, .jsonl (.ndjson, .json: JSON lines), .parquet, .csv, .tsv or .arrow file (each maybe .gz, .bz2, .xz, "
        ".zst), token ids (.bin, .npy), or a folder of them (train*/validation*/test* files: split by name, test never "
        "read); tinyshakespeare: the built-in full text (unset: the built-in smoke corpus, its first 300 KB)",
    )
    tokenizer: str = setting(
        "char",
        "char | byte | bpe (trained locally on the training split) | PATH/tokenizer.json (a pretrained Hugging Face "
        "tokenizer file)",
    )
    text_field: str = setting(
        "text", "the field of each .jsonl object, and the .parquet, .csv, .tsv or .arrow column, that holds the text"
    )
    vocab_size: int = setting(
        1024,
        "vocabulary size the bpe tokenizer learns; with token files, their declared vocabulary (0: the largest id)",
    )
    val_fraction: float = setting(0.1, "the last fraction of the text held out for validation")
    val_data: str = setting(
        "",
        "the fixed evaluation set, PATH or PATH:TOKENS (text or token ids; its first TOKENS), instead of --val-fraction",
    )
    cache_dir: str = setting("", "token cache folder (unset: ~/.cache/modern-gpt, or $MODERN_GPT_CACHE)")
    eval_data: tuple[str, ...] | None = setting(  # made a tuple by validate: () when unset
        None,
        "an extra evaluation set NAME=PATH, read as --data reads (text, token ids, a folder: its validation "
        "files if it has some), tokenized with the run's tokenizer; each gives NAME_loss and NAME_bpb (bits per "
        "byte); repeat for more",
    )

    def __post_init__(self) -> None:
        self.validate()

    @property
    def eval_sets(self) -> list[tuple[str, str]]:
        """--eval-data's (NAME, PATH) pairs, in the order given."""
        return [tuple(spec.split("=", 1)) for spec in self.eval_data]

    @property
    def tokenizer_file(self) -> Path | None:
        """The pretrained tokenizer.json that --tokenizer names, or None for char, byte and bpe."""
        return None if self.tokenizer in TOKENIZERS else Path(self.tokenizer).expanduser()

    def validate(self) -> None:
        # A tokenizer file is read when a corpus is tokenized (load_corpus), not here: a checkpoint whose
        # settings name one stays loadable after the file is gone, since it holds the tokenizer itself.
        file = self.tokenizer_file
        if file is not None and not (file.exists() or "/" in self.tokenizer or self.tokenizer.endswith(".json")):
            raise ConfigError(
                f"unknown tokenizer {self.tokenizer!r}; choose one of {', '.join(TOKENIZERS)}, "
                "or give the path of a Hugging Face tokenizer.json."
            )
        if not self.text_field:
            raise ConfigError("text_field must not be empty; give the .jsonl field (or .parquet column) of the text.")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be between 0 and 1, got {self.val_fraction}.")
        if self.vocab_size < 0:
            raise ConfigError(f"vocab_size must be 0 or more, got {self.vocab_size}.")
        if self.tokenizer == "bpe" and not 257 <= self.vocab_size <= 1_000_000:
            raise ConfigError(f"a bpe vocab_size must be between 257 and 1000000, got {self.vocab_size}.")
        self.eval_data = tuple(self.eval_data or ())
        check_eval_data(self.eval_data)


# Column names the runs already hold: an evaluation set's NAME_loss or NAME_bpb may not take one of them
TAKEN_METRICS = ("train", "val", "best_val", "ctx2x")
EVAL_NAME = "a letter, then letters, digits or _"


def check_eval_data(specs: tuple[str, ...]) -> None:
    """Each --eval-data is NAME=PATH, no NAME twice. NAME is a short identifier, since it names columns."""
    seen = set()
    for spec in specs:
        name, sep, path = spec.partition("=") if isinstance(spec, str) else ("", "", "")
        if not sep or not path or not name:
            raise ConfigError(f"--eval-data {spec!r} must be NAME=PATH, for example code=src.jsonl.")
        if not (name[:1].isascii() and name[:1].isalpha() and name.replace("_", "").isalnum() and name.isascii()):
            raise ConfigError(f"--eval-data {spec}: the name {name!r} must be {EVAL_NAME} (it names columns).")
        if name.lower() in TAKEN_METRICS:
            raise ConfigError(f"--eval-data {spec}: the name {name!r} is taken by a column the runs hold; rename it.")
        if name.lower() in seen:
            raise ConfigError(f"--eval-data names two sets {name!r}; give each set its own name.")
        seen.add(name.lower())


# ---------------------------------------------------------------------------
# The ablation's options: its seeds, its statistics and where its runs train (ablate, duel and power, and a
# config file's [ablation] section). Not a run's settings: a checkpoint does not hold them, and the Spec
# (planning.py) stores those that decide an ablation's numbers.
# ---------------------------------------------------------------------------
TRACKERS = ("tensorboard", "mlflow", "wandb")  # --track's names: the one place they live (trackers/ has each)
DEFAULT_MLFLOW_URI = "sqlite:///mlflow.db"  # MLflow's own default: `mlflow ui` in the same folder opens it


def check_names(names) -> tuple[str, ...]:
    """The --track names, each known, without repeats."""
    names = tuple(dict.fromkeys(names or ()))
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(
                f"unknown tracker {name!r} in --track; choose {', '.join(TRACKERS[:-1])} or {TRACKERS[-1]}."
            )
    return names


AUTO = "auto"  # --seeds auto, --jobs auto
POWER_SEEDS = 8  # `modern-gpt power` without --seeds: seeds of its variant and of its placebo


class _Chosen:
    """given: the names a config file or a flag gave, as Settings.given. A default nobody typed is no choice."""

    given: tuple[str, ...]

    def choice(self, name: str):
        """The option's value when a config file or a flag gave it. None for a default nobody chose."""
        return getattr(self, name) if name in self.given else None

    @classmethod
    def names(cls) -> list[str]:
        """Its options, in the flags' order (given is none)."""
        return [f.name for f in fields(cls) if f.metadata.get("setting") is not False]


def _given():
    """Not an option: a part's given (see _Chosen)."""
    return field(default=(), compare=False, metadata={"setting": False})


@dataclass
class StatisticsOptions(_Chosen):
    """The statistical choices: the seeds and the verdicts' tests. planning.Request reads those given."""

    # Each help is the one source of the flag's help and docs/settings.md's options table (see settings.py).
    seeds: int | str = setting(  # 80% power at 3 seeds needs 8.0 paired sds in a 6-component table; at 5, 2.8
        5,
        "run every row with seeds 0..N-1, or auto: add seeds until every row is decided or cannot be by --max-seeds "
        f"(power: N only, {POWER_SEEDS} by default)",
    )
    seed_list: str | None = setting(None, "explicit seeds instead, e.g. 3,7,11 or a range 5-28")
    min_seeds: int = setting(3, "with --seeds auto: the first look at the data")
    max_seeds: int = setting(10, "with --seeds auto: stop at this many seeds even if rows are undecided")
    alpha: float = setting(0.05, "the chance of any wrong better/worse in the whole table (family-wise error rate)")
    margin: float | None = setting(None, "nats: also call a row 'same' when an equivalence test shows |Δ val| < this")
    placebo: bool = setting(True, "add the first row again with only its weight init changed: what init alone does")
    match_params: bool = setting(
        False, "adjust each variant's MLP width so that its non-embedding parameters are within 1% of the first row's"
    )
    given: tuple[str, ...] = _given()


@dataclass
class ExecutionOptions(_Chosen):
    """Where and how the runs train: the executor (EXECUTORS, below) and its options."""

    jobs: int | str = setting(
        AUTO, "runs at once, in separate processes; auto: one single-thread run per core on a CPU, one on a GPU"
    )
    executor: str = setting(
        "local",
        'local: this machine (--jobs); ray: one Ray task per run on a Ray cluster (needs pip install -e ".[ray]"); '
        'slurm: one Slurm job array per round of runs, from a login node (needs pip install -e ".[slurm]")',
    )  # the names are EXECUTORS', below
    ray_address: str | None = setting(
        None,
        "with --executor ray: the cluster's host:port (unset: RAY_ADDRESS, else a local Ray started for the ablation)",
    )
    cpus_per_run: float | None = setting(
        None,
        "with --executor ray or slurm: the CPUs each run reserves (unset: the run's torch threads, 1 unless --threads)",
    )
    gpus_per_run: float | None = setting(
        None,
        "with --executor ray or slurm: the GPUs each run reserves; on Ray fractions share one (0.25: four runs a GPU; "
        "unset: 0)",
    )
    partition: str | None = setting(None, "with --executor slurm: the partition the runs train in (unset: its default)")
    time_limit: int | str | None = setting(
        None,
        "with --executor slurm: each array task's time limit, in minutes or as Slurm's [D-]HH:MM[:SS] (unset: three "
        "times the task's estimated time, at least 10 minutes)",
    )
    array_parallelism: int | None = setting(
        None, "with --executor slurm: at most this many array tasks run at once (unset: as many as Slurm allows)"
    )
    sbatch: tuple[str, ...] | None = setting(  # made a tuple by validate
        None,
        "with --executor slurm: another sbatch option for every task, as KEY=VALUE (account=lab, qos=high; KEY= for "
        "a bare flag); repeat for more",
    )
    runs_per_task: int | None = setting(
        None, "with --executor slurm: runs one array task trains one after another, for short runs (unset: 1)"
    )
    detach: bool | None = setting(
        None,
        "with --executor slurm: submit the runs and exit; modern-gpt ablate --resume DIR later collects them, submits "
        "again what did not finish, and prints the table",
    )
    max_retries: int = setting(
        2,
        "times a run is started again when its worker process, node or Slurm task dies; then it is recorded as failed",
    )
    given: tuple[str, ...] = _given()

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        self.jobs = _jobs(self.jobs)
        self._check_executor()
        if self.max_retries < 0:
            raise ConfigError(f"--max-retries must not be negative, got {self.max_retries}.")

    def _check_executor(self) -> None:
        """The executor is one of EXECUTORS, and its own options pass its check. Another executor's option is
        refused, since it would be silently ignored."""
        kind = EXECUTORS.get(self.executor)
        if kind is None:
            raise ConfigError(f"unknown executor {self.executor!r}; choose {' or '.join(EXECUTORS)}.")
        for option in dict.fromkeys(o for other in EXECUTORS.values() for o in other.options):
            if option not in kind.options and getattr(self, option) is not None:
                owners = [name for name, other in EXECUTORS.items() if option in other.options]
                raise ConfigError(f"--{option.replace('_', '-')} goes with --executor {' or '.join(owners)}.")
        if kind.check is not None:
            kind.check(self)


@dataclass
class TrackingOptions(_Chosen):
    """The trackers every run and the verdicts are logged to."""

    track: tuple[str, ...] | None = setting(  # made a tuple by validate: () when unset
        None,
        f"log every run and the verdicts to this tracker: {' | '.join(TRACKERS)}; repeat for more (each needs pip "
        'install -e ".[NAME]"; see README\'s Trackers)',
    )
    mlflow_uri: str | None = setting(
        None,
        "with --track mlflow: the tracking URI, a server (http://127.0.0.1:5000) or a store (sqlite:///PATH.db) "
        f"(unset: MLFLOW_TRACKING_URI, else {DEFAULT_MLFLOW_URI} in the current folder, which mlflow ui opens)",
    )
    given: tuple[str, ...] = _given()

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        self.track = check_names(self.track)
        if self.mlflow_uri is not None and "mlflow" not in self.track:
            raise ConfigError("--mlflow-uri goes with --track mlflow.")


@dataclass
class AblationOptions:
    """An ablation's options, by concern: ablate's, duel's, power's and scale's; train reads the trackers. Their
    fields are the flags and a config file's [ablation] keys, in this order (settings.py). The seeds and the
    statistics are checked as the Spec is planned (planning.py)."""

    statistics: StatisticsOptions = field(default_factory=StatisticsOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)
    tracking: TrackingOptions = field(default_factory=TrackingOptions)

    @classmethod
    def parts(cls) -> dict[str, type]:
        """Each part's field name and its class (the field's default_factory), in the flags' order."""
        return {f.name: f.default_factory for f in fields(cls)}

    @classmethod
    def of(cls, values: dict[str, object]) -> AblationOptions:
        """The options from {name: value}: a config file's [ablation] keys, then the flags given. Each part in
        turn is made from its own, checks itself and records them as given."""
        parts = {}
        for name, part in cls.parts().items():
            own = {k: v for k, v in values.items() if k in part.names()}
            parts[name] = part(**own, given=tuple(own))
        return cls(**parts)


# ---------------------------------------------------------------------------
# The executors: where an ablation's runs train. The one registry: a name, the class (imported only when an
# ablation makes one), the options that go with it alone and their check. A new executor is one module with
# its class (the interface: ablation/executors/__init__.py's Executor) and one line here.
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ExecutorKind:
    where: str  # "package.module:Class"
    options: tuple[str, ...] = ()  # ExecutionOptions' fields that go with this executor alone (None: not given)
    check: Callable[[ExecutionOptions], None] | None = None  # the check of its options, in one sentence

    def load(self) -> type:
        module, name = self.where.split(":")
        return getattr(importlib.import_module(module), name)


def _check_ray(o: ExecutionOptions) -> None:
    if o.jobs != AUTO:  # else it would be silently ignored
        raise ConfigError(
            f"--jobs {o.jobs} goes with --executor local; on Ray every run is a task, and --cpus-per-run and "
            "--gpus-per-run decide how many train at once."
        )
    if o.ray_address is not None and not o.ray_address.strip():
        raise ConfigError("--ray-address is empty; give host:port, or leave it out for a local Ray.")
    if o.cpus_per_run is not None and not 0 < o.cpus_per_run < math.inf:
        raise ConfigError(f"--cpus-per-run must be a positive number, got {o.cpus_per_run}.")
    gpus = o.gpus_per_run
    if gpus is not None and not (0 <= gpus < math.inf and (gpus <= 1 or gpus == int(gpus))):
        raise ConfigError(
            f"--gpus-per-run must be a fraction up to 1 (0.25: four runs share a GPU) or a whole number, got {gpus}."
        )


def slurm_minutes(value: int | str) -> int:
    """--time-limit in whole minutes, seconds rounded up. It is a number of minutes, or Slurm's MM:SS,
    HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS."""
    text = str(value).strip()
    days, _, clock = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = clock.split(":")
    try:
        if not days.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
            raise ValueError
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(
            f"--time-limit must be minutes or Slurm's [D-]HH:MM[:SS] (90, 1:30:00, 2-00:00:00), got {value!r}."
        ) from None
    if "-" in text:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (numbers + [0, 0])[:3]
    else:  # MM, MM:SS, HH:MM:SS
        h, m, sec = ([0, 0] + numbers)[-3:] if len(numbers) == 3 else (0, numbers[0], numbers[1] if numbers[1:] else 0)
    minutes = int(days) * 1440 + h * 60 + m + math.ceil(sec / 60)
    if minutes < 1:
        raise ConfigError(f"--time-limit must be at least a minute, got {value!r}.")
    return minutes


def _check_slurm(o: ExecutionOptions) -> None:
    if o.jobs != AUTO:  # else it would be silently ignored
        raise ConfigError(
            f"--jobs {o.jobs} goes with --executor local; on Slurm every run is an array task, and --array-parallelism "
            "decides how many train at once."
        )
    for name in ("cpus_per_run", "gpus_per_run", "array_parallelism", "runs_per_task"):
        value, least = getattr(o, name), 0 if name == "gpus_per_run" else 1
        if value is not None and not (value == int(value) and least <= value < math.inf):
            what = "a whole number of 0 or more" if least == 0 else "a whole number of 1 or more"
            raise ConfigError(f"--{name.replace('_', '-')} must be {what} on Slurm, got {value}.")
    if o.partition is not None and not o.partition.strip():
        raise ConfigError("--partition is empty; give a partition's name, or leave it out for the cluster's default.")
    if o.time_limit is not None:
        slurm_minutes(o.time_limit)
    o.sbatch = tuple(o.sbatch) if o.sbatch is not None else None
    for entry in o.sbatch or ():
        key, sep, _ = entry.partition("=")
        if not sep or not key.strip("-").strip():
            raise ConfigError(f"--sbatch takes KEY=VALUE (account=lab, qos=high), got {entry!r}.")


SLURM_OPTIONS = ("partition", "time_limit", "array_parallelism", "sbatch", "runs_per_task", "detach")
EXECUTORS: dict[str, ExecutorKind] = {
    "local": ExecutorKind("modern_gpt.ablation.executors.local:Local"),
    "ray": ExecutorKind(
        "modern_gpt.ablation.executors.ray:Ray", ("ray_address", "cpus_per_run", "gpus_per_run"), _check_ray
    ),
    "slurm": ExecutorKind(
        "modern_gpt.ablation.executors.slurm:Slurm", ("cpus_per_run", "gpus_per_run", *SLURM_OPTIONS), _check_slurm
    ),
}


def _jobs(jobs: int | str) -> int | str:
    """--jobs parsed: a whole number of 1 or more, or auto (the best use of this machine)."""
    if isinstance(jobs, str):
        if jobs.strip().lower() == AUTO:
            return AUTO
        try:
            jobs = int(jobs)
        except ValueError:
            raise ConfigError(f"--jobs must be a whole number or auto, got {jobs!r}.") from None
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}.")
    return jobs
