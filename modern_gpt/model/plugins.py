"""Plugin files: components of your own (components.Component). Each file runs as a module of its own (load).
It is sent to workers by value (jobs_plugins) and recorded by sha256 (records, check_recorded).
A plugin is the user's own trusted code, as in litgpt and torchtitan. Only what would silently change the table
is guarded: torch's global numeric state (numeric_guard) and causality (check_forward). Torch-free to import."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
import tokenize
import traceback
import types
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from ..core.components import BUILT_COUNTS, COMPONENTS, PLUGINS, SLOTS, Component, PluginError
from ..core.config import PIECES, ModelConfig

ENTRY_POINTS = "modern_gpt.components"  # an installed package's plugin: [project.entry-points] name = "module"


@dataclass(frozen=True)
class Plugin:
    path: str  # absolute, as loaded here (a worker's copy keeps the driver's for messages)
    source: str
    sha256: str
    names: tuple[str, ...]
    package: str = ""  # an installed plugin's package, where its relative imports resolve ("" for a --plugin file)

    @property
    def record(self) -> dict:
        return {"file": Path(self.path).name, "path": self.path, "sha256": self.sha256, "components": list(self.names)}


LOADED: dict[str, Plugin] = {}  # sha256 -> the plugin loaded from that source
RECORD_SCHEMA = {"file": str, "path": str, "sha256": str, "components": [str]}  # a folder's or checkpoint's


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def read(path) -> str:
    """A plugin file's source, decoded as Python decodes it. A missing file, a folder or a FIFO is one sentence."""
    p = Path(path).expanduser()
    try:
        if not p.exists():
            link = " (a symbolic link to nothing, or a loop of them)" if p.is_symlink() else ""
            raise PluginError(f"the plugin {path} does not exist{link}")
        if not p.is_file():
            raise PluginError(f"the plugin {path} is not a regular file")
        data = p.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding).removeprefix("\ufeff")
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as e:  # SyntaxError: an unknown coding line
        raise PluginError(f"cannot read the plugin {path}: {e}") from None


def load(paths=()) -> list[Plugin]:
    """Register each --plugin FILE (and TOML plugins = [...]), then the installed entry points."""
    out = [install(source=read(p), path=str(Path(p).expanduser().resolve())) for p in paths]  # read: a loop first
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        name = f"{ep.value} (entry point {ep.name!r} of {ENTRY_POINTS})"
        module = _loading(name, ep.load)  # its package's own imports first, as Python imports it
        path = getattr(module, "__file__", None) or ep.value
        out.append(install(str(path), read(path), getattr(module, "__package__", None) or ""))
    return out


def install(path: str, source: str, package: str = "") -> Plugin:
    """Run a plugin's source as a module of its own and register its COMPONENTS. The same source loads once."""
    digest = sha256(source)
    if digest in LOADED:
        return LOADED[digest]
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        line = f" on line {e.lineno}" if e.lineno else ""
        raise PluginError(f"the plugin {path} has a syntax error{line}: {e.msg}") from e
    except (ValueError, RecursionError, MemoryError) as e:  # a null byte, nesting too deep for the parser
        raise PluginError(f"the plugin {path} cannot be compiled: {type(e).__name__}: {e}") from e
    module = types.ModuleType(f"modern_gpt_plugin_{Path(path).stem}_{digest[:12]}")
    module.__file__, module.__package__ = path, package or None
    sys.modules[module.__name__] = module  # dataclasses and pickle look a class's module up there
    try:
        _loading(path, lambda: exec(code, module.__dict__))
        components = _loading(path, lambda: _declared(module, path), ": reading its COMPONENTS")
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    for c in components:
        PLUGINS[c.name] = c
    LOADED[digest] = Plugin(path, source, digest, tuple(c.name for c in components), package)
    return LOADED[digest]


def _loading(where: str, body, doing: str = ""):
    """body() under numeric_guard. What it raises, an exit too, is one sentence naming the file and line."""
    try:
        with numeric_guard(where, "while loading"):
            return body()
    except (PluginError, KeyboardInterrupt):
        raise
    except BaseException as e:
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == where]
        said = f"{doing} {_raised(e)}{'' if doing else ' while loading'}{f' (line {lines[-1]})' if lines else ''}"
        advice = "--debug shows the traceback" if isinstance(e, Exception) else "a plugin may not end the process"
        raise PluginError(f"the plugin {where}{said}; {advice}") from e


def _raised(e: BaseException) -> str:
    text = f"SystemExit({e.code!r})" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}".rstrip(": ")
    return f"raised {text}"


def _declared(module, path: str) -> list[Component]:
    """The module's COMPONENTS, checked, as plain Components whose source is the file."""
    found = getattr(module, "COMPONENTS", None)
    found = [found] if isinstance(found, Component) else found  # one Component, not in a list: what was meant
    if not isinstance(found, (list, tuple)) or not found:
        raise PluginError(f"the plugin {path} declares no COMPONENTS = [Component(...), ...] at module level")
    names, out = set(), []
    for c in list(found):
        why = _component_problem(c, names)
        if why:
            raise PluginError(f"the plugin {path}: {why}")
        names.add(c.name)
        out.append(Component(c.name, c.summary, c.slot, c.factory, c.applies_to, source=path))
    return out


def _component_problem(c, names: set) -> str | None:
    if not isinstance(c, Component):
        return f"{c!r} in COMPONENTS is not a modern_gpt.Component"
    if type(c.name) is not str or not (c.name.isascii() and c.name.isidentifier()):
        what = f"the component name {c.name!r} is not valid" if c.name else "a component has no name"
        return f"{what}: a name is an ASCII Python identifier (letters, digits and _, not first a digit), such as relu2"
    if type(c.summary) is not str or not c.summary.strip():
        return f"component {c.name!r} has no summary (one line, 'classic piece -> yours')"
    if type(c.slot) is not str or c.slot not in SLOTS:
        return f"component {c.name!r} has the unknown slot {c.slot!r}; the slots are {', '.join(SLOTS)}"
    if c.slot == "position" and c.applies_to not in ("embeddings", "qk"):
        return f"component {c.name!r} applies_to {c.applies_to!r}; a position applies to 'embeddings' or 'qk'"
    if not callable(c.factory):
        return f"component {c.name!r} has no factory (a callable that builds its module)"
    if c.name in COMPONENTS or c.name in ("classic", "modern"):
        return f"component {c.name!r} has the name of a built-in one; rename it"
    if c.name in PLUGINS or c.name in names:
        where = PLUGINS[c.name].source if c.name in PLUGINS else "this file"
        return f"component {c.name!r} is declared by another plugin too ({where}); rename one"
    return None


def jobs_plugins(cfg: ModelConfig) -> tuple[tuple[str, str, str], ...]:
    """(path, source, package) of each plugin a model uses. A job carries them to its worker."""
    used = {PLUGINS[n].source for n in cfg.extra_components}
    return tuple((p.path, p.source, p.package) for p in LOADED.values() if p.path in used)


def install_all(sources) -> None:
    for path, source, package in sources:
        install(path, source, package)


def records(cfgs) -> list[dict]:
    """Each used plugin's name and source hash, for meta.json and checkpoints."""
    used = {PLUGINS[n].source for cfg in cfgs for n in cfg.extra_components}
    return [p.record for p in LOADED.values() if p.path in used]


def loaded_records() -> list[dict]:  # every plugin loaded in this process, used or not, for meta.json
    return [p.record for p in LOADED.values()]


def check_recorded(recorded, where, read_only: bool = False) -> list[str]:
    """Load each plugin a folder recorded (a --plugin copy, else its file), its sha256 checked. With read_only
    (a report), a missing file's components get stand-ins, and its files are returned for a footnote."""
    missing = []
    for r in recorded or []:
        if r["sha256"] in LOADED:
            continue
        names = ", ".join(r["components"])
        now = next((p for p in LOADED.values() if set(p.names) & set(r["components"])), None)
        path = now.path if now else r["path"]
        gone = f"{where} was made with the plugin {path} ({names}), which is missing; put it back, or give a copy "
        if now is None and not Path(path).is_file() and read_only:  # stand-ins, so that the spec reads
            for name in [n for n in r["components"] if n not in PLUGINS]:
                PLUGINS[name] = Component(name, f"(the plugin {path} is missing)", "(missing)", _refuse(gone), path)
            missing.append(f"{path} ({names})")
        elif now is None and not Path(path).is_file():
            raise PluginError(gone + "with --plugin")
        elif sha256(source := now.source if now else read(path)) != r["sha256"]:
            raise PluginError(
                f"the plugin {path} has changed since {where} was made with it ({names}; its source's sha256 "
                "differs); put back the original"
            )
        else:
            install(path, source)
    return missing


def _refuse(gone: str):
    """A stand-in's factory. Building the component raises the missing plugin's sentence."""

    def refuse(*_):
        raise PluginError(gone + "with --plugin")

    return refuse


def files_of(cfg: ModelConfig) -> str:
    """The plugin files a model uses, joined for a sentence ("" for none)."""
    return ", ".join(sorted({PLUGINS[n].source for n in cfg.extra_components}))


def raised_in(e: BaseException) -> str | None:
    """The plugin file an exception was raised in, or None. Say, a forward that fails mid-run."""
    files = {p.path for p in LOADED.values()}
    frames = [f.filename for f in traceback.extract_tb(e.__traceback__) if f.filename in files]
    return frames[-1] if frames else None


def built_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters per piece and in total, for config.param_counts. The model is built on the meta device."""
    import torch

    from .gpt import GPT

    with torch.device("meta"):
        model = GPT(cfg)
    counts = dict.fromkeys(PIECES, 0)
    for name, p in model.named_parameters():  # tied weights once
        counts[_piece(name)] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


BUILT_COUNTS[:] = [built_counts]


def _piece(name: str) -> str:
    if name.endswith(".bias"):
        return "biases"
    for prefix, piece in (("tok_emb", "token_embedding"), ("lm_head", "output_head"), ("pos", "position_table")):
        if name.startswith(prefix):
            return piece
    if ".mlp." in name:
        return "mlp"
    if "norm" in name.rsplit(".", 1)[0]:
        return "norms"
    return "attention" if ".attn." in name else "mlp"


# ---------------------------------------------------------------------------
# What would silently change the table: torch's global numeric state, and causality
# ---------------------------------------------------------------------------
def _numeric_settings() -> dict:
    """name -> (read, set back) of each process-wide setting. Every run's numbers depend on them."""
    import torch

    def set_autocast(on: tuple) -> None:
        for device in ("cpu", "cuda"):
            torch.set_autocast_enabled(device, device in on)

    return {
        "torch's default dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
        "deterministic algorithms": (torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
        "float32 matmul precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "torch's threads": (torch.get_num_threads, torch.set_num_threads),
        "torch's default device": (  # cpu: none set, as torch starts
            lambda: str(torch.get_default_device()),
            lambda device: torch.set_default_device(None if device == "cpu" else device),
        ),
        "autocast": (lambda: tuple(d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)), set_autocast),
    }


def numeric_state() -> dict:
    """Each setting of _numeric_settings by name. A plugin must leave them as it found them."""
    return {name: get() for name, (get, _) in _numeric_settings().items()}


@contextlib.contextmanager
def numeric_guard(where: str, when: str):
    """Put back a change to numeric_state() made meanwhile, then refuse it. The next rows train as the others did."""
    before = numeric_state()
    try:
        yield
    finally:
        after, settings = numeric_state(), _numeric_settings()
        changed = [name for name in before if after[name] != before[name]]
        for name in changed:
            with contextlib.suppress(Exception):
                settings[name][1](before[name])
    if changed:
        name = changed[0]
        raise PluginError(
            f"the plugin {where} set {name} from {before[name]} to {after[name]} {when}; a plugin must leave "
            "torch's global state as it found it, for every row's runs train in this process"
        )


def check_forward(cfg: ModelConfig) -> None:
    """Two sequences forward and backward, before training. Refused: a factory that raises, a wrong shape (checked
    past (1, 1), where a pooled axis passes), a failing backward, a numeric_guard change, a leak of later tokens."""
    if not cfg.extra_components:
        return
    cfg, T = replace(cfg, dropout=0.0), min(16, cfg.context)  # 16: a shift by up to 15 positions is seen
    try:
        with numeric_guard(files_of(cfg), "in its factory, forward or backward"):
            leak = _forward_backward(cfg, T)
    except (PluginError, KeyboardInterrupt):
        raise
    except BaseException as e:
        text = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}".rstrip(": ")
        where = raised_in(e) or files_of(cfg)
        raise PluginError(f"the plugin {where} failed a {T}-token forward and backward: {text}") from e
    if leak:
        raise PluginError(
            f"the plugin {files_of(cfg)} ({', '.join(cfg.extra_components)}) is not causal: the outputs before a "
            f"position change with the tokens after it ({leak}), so the model would see the tokens it is to "
            "predict; a component may mix position t only with positions up to t"
        )


def _forward_backward(cfg: ModelConfig, T: int):
    """Backpropagate two sequences' loss. Returns how tokens from T // 2 on leak into earlier outputs ("" if not).
    Changed, they must not move those outputs. The outputs' gradient for them must be zero."""
    import torch

    from .gpt import GPT

    def leaf(module, args, out):  # the embeddings as a leaf of the graph, to take gradients with respect to
        embedded.append(out.detach().requires_grad_())
        return embedded[-1]

    embedded, p = [], T // 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(cfg)
        for module in model.modules():
            if (component := getattr(module, "_modern_gpt_component", None)) is not None:
                module.register_forward_hook(_shape_hook(component, cfg))
        model.tok_emb.register_forward_hook(leaf)
        tokens = torch.randint(cfg.vocab_size, (2, T))
        changed = (tokens[:, p:] + torch.randint(1, max(cfg.vocab_size, 2), (2, T - p))) % cfg.vocab_size
        later = torch.cat([tokens[:, :p], changed], dim=1)
        with torch.enable_grad():
            torch.manual_seed(1)  # the same draws in both forwards (a plugin's own dropout, say)
            logits, loss = model(tokens, tokens)
            early = logits[:, :p].float()
            (grad,) = torch.autograd.grad((early * torch.randn_like(early)).sum(), embedded[0], retain_graph=True)
            loss.backward()
        with torch.no_grad():
            torch.manual_seed(1)
            moved, early = model(later)[0], early.detach()
    if p > 0 and (moved[:, :p] - early).abs().max() > 1e-4 * early.abs().max() + 1e-6:
        return "in the forward pass"
    return "through the gradient" if p > 0 and grad[:, p:].abs().max() > 1e-5 * grad[:, :p].abs().max() else ""


def _shape_hook(component: Component, cfg: ModelConfig):
    def hook(module, args, output):
        if component.slot in ("norm", "mlp", "block"):
            want = tuple(args[0].shape)
        elif component.slot == "qk" or component.applies_to == "qk":
            want = (tuple(args[0].shape), tuple(args[1].shape))
        else:  # added to the embeddings: exactly (T, dim), for a (1, 1, dim) or a (T, 1) would broadcast
            want = (int(args[1]), cfg.dim)
        got = tuple(_shape(o) for o in output) if isinstance(output, tuple) else _shape(output)
        if got != want:
            raise PluginError(f"{component.where} returns shape {got} where the model needs {want}")

    return hook


def _shape(output):
    return tuple(output.shape) if hasattr(output, "shape") else None


@contextlib.contextmanager
def guarded_run(cfg: ModelConfig, train: bool = False):
    """A plugin row's run under numeric_guard: a change made mid-run is that run's error. With train
    (`modern-gpt train`, no next run to go on with), what the plugin raises, an exit too, is one sentence."""
    try:
        with numeric_guard(files_of(cfg), "while training") if cfg.extra_components else contextlib.nullcontext():
            yield
    except (Exception, SystemExit) as e:
        where = raised_in(e) or (files_of(cfg) if isinstance(e, SystemExit) and cfg.extra_components else None)
        if not train or where is None or isinstance(e, PluginError):
            raise
        raise PluginError(f"the plugin {where} {_raised(e)} while training; no checkpoint was written") from e


def guarded_train(cfg: ModelConfig):
    return guarded_run(cfg, train=True)
