"""Plugin files: components of your own (components.Component), loaded from the user's file, never the package.

load() reads each --plugin FILE (and the `modern_gpt.components` entry points of installed packages), runs it
as a module of its own and registers its module-level COMPONENTS in components.PLUGINS. A plugin travels by
value: a job carries each file's source (Plugin.source) and install() runs it again in the worker, so a
worker machine needs no file at the same path. Results folders and checkpoints record each file's name and
the sha256 of its source (records); check_recorded refuses a missing or changed one. A plugin's code runs
guarded (_guarded): what it changes of the process every run trains in is put back and refused by name, a thread
it leaves running cannot keep the process alive, and sys.exit or os._exit is a sentence, not the end of the
command. Torch-free to import: only price and check_forward build a model, and only a command that builds models
loads a plugin.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import os
import signal
import sys
import threading
import traceback
import types
from dataclasses import dataclass, replace
from functools import partial
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


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def read(path) -> str:
    """A plugin file's source; a missing file, a folder or a FIFO is one sentence naming it."""
    p = Path(path).expanduser()
    if not p.exists():
        raise PluginError(f"the plugin {path} does not exist")
    if not p.is_file():
        raise PluginError(f"the plugin {path} is not a regular file")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PluginError(f"cannot read the plugin {path}: {e}") from None


def load(paths=()) -> list[Plugin]:
    """Each --plugin FILE (and TOML plugins = [...]), then the installed entry points, registered."""
    out = [install(str(Path(p).expanduser().resolve()), read(p)) for p in paths]
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        module = _imported(ep)
        path = getattr(module, "__file__", None) or ep.value
        out.append(install(str(path), read(path), getattr(module, "__package__", None) or ""))
    return out


def _imported(ep) -> types.ModuleType:
    """An installed package's plugin module, imported as Python imports it (its package's own imports first), and
    guarded as a file's source is run: its import error or exit is its name, not a traceback or the end."""
    name = f"{ep.value} (entry point {ep.name!r} of {ENTRY_POINTS})"
    try:
        with _guarded(name, "while loading"):
            return ep.load()
    except PluginError:
        raise
    except (Exception, SystemExit, _Exited) as e:
        raise PluginError(f"the installed plugin {name} {_raised(e)} while loading{_advice(e)}") from e


def install(path: str, source: str, package: str = "") -> Plugin:
    """Run a plugin's source as a module of its own and register its COMPONENTS; the same source twice is
    one plugin (a worker given the job's plugins again, a test). An installed package's module runs inside
    its package, so that its relative imports (from .layers import ...) resolve."""
    digest = sha256(source)
    if digest in LOADED:
        return LOADED[digest]
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise PluginError(f"the plugin {path} has a syntax error on line {e.lineno}: {e.msg}") from e
    module = types.ModuleType(f"modern_gpt_plugin_{Path(path).stem}_{digest[:12]}")
    module.__file__ = path
    module.__package__ = package or None
    sys.modules[module.__name__] = module  # dataclasses and pickle look a class's module up there
    try:
        _run(code, module, path)
    except BaseException:
        del sys.modules[module.__name__]
        raise
    components = [replace(c, source=path) for c in _declared(module, path)]
    for c in components:
        PLUGINS[c.name] = c
    plugin = Plugin(path, source, digest, tuple(c.name for c in components), package)
    LOADED[digest] = plugin
    return plugin


def _run(code, module, path: str) -> None:
    """The plugin's module body, guarded: an error, or an exit, is one sentence naming the file and its line."""
    try:
        with _guarded(path, "while loading"):
            exec(code, module.__dict__)
    except PluginError:
        raise
    except (Exception, SystemExit, _Exited) as e:  # an exit too: else the command ends, silently, with its code
        raise PluginError(f"the plugin {path} {_raised(e)} while loading{_line_in(e, path)}{_advice(e)}") from e


def _raised(e: BaseException) -> str:
    if isinstance(e, _Exited):
        return f"called os._exit({e.code})"
    return f"raised SystemExit({e.code!r})" if isinstance(e, SystemExit) else f"raised {type(e).__name__}: {e}"


def _advice(e: BaseException) -> str:
    if isinstance(e, Exception):
        return "; --debug shows the traceback"
    return "; a plugin declares components and may not end the process"


# ---------------------------------------------------------------------------
# The process a plugin's code runs in: every row's runs train in it too
# ---------------------------------------------------------------------------
class _Exited(BaseException):
    """os._exit called by a plugin's code while guarded: raised in its place (a BaseException, as SystemExit is,
    so that the plugin's own `except Exception` does not swallow it)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _watched() -> list[tuple]:
    """What a run depends on that a plugin's code can change for the whole process: every row's numbers (dtype,
    grad mode, threads, device, the algorithms and matmul precision), where the results land (the working
    folder), what the user sees (stdout, stderr), Ctrl-C (the signal handlers) and the environment variables
    a run reads (RUN_ENVIRONMENT). Each (what, read, put back)."""
    import torch

    watched = [
        ("torch's default dtype", torch.get_default_dtype, torch.set_default_dtype),
        ("grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
        ("the working folder", _cwd, os.chdir),
        ("torch's threads", torch.get_num_threads, torch.set_num_threads),
        ("torch's inter-op threads", torch.get_num_interop_threads, torch.set_num_interop_threads),
        ("deterministic algorithms", torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
        ("float32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        ("sys.stdout", lambda: sys.stdout, partial(setattr, sys, "stdout")),
        ("sys.stderr", lambda: sys.stderr, partial(setattr, sys, "stderr")),
    ]
    watched.append((ENVIRONMENT, _run_environment, _set_run_environment))
    if hasattr(torch, "get_default_device"):  # torch 2.3 and later
        watched.append(("torch's default device", lambda: str(torch.get_default_device()), _set_default_device))
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            number = getattr(signal, name)
            watched.append(
                (f"the handler of {name}", partial(signal.getsignal, number), partial(signal.signal, number))
            )
    return watched


ENVIRONMENT = "the environment"


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under this process: nothing a plugin changed
        return None


def _set_default_device(device: str) -> None:
    import torch

    torch.set_default_device(None if device == "cpu" else device)  # cpu: none set, as torch starts


# The environment variables a run reads, through torch and its math libraries (threads, devices, allocators,
# compilers), the trackers, Ray or modern-gpt itself; a worker starts with the driver's environment, so a plugin
# that sets one changes every row's runs. Other variables are the plugin's own business: libraries set some as
# they import (scikit-learn's KMP_DUPLICATE_LIB_OK, MLflow's telemetry id).
RUN_ENVIRONMENT = (
    "CUDA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO_",
    "BLIS_",
    "VECLIB_",
    "NUMEXPR_",
    "PYTORCH_",
    "TORCH",
    "CUBLAS",
    "CUDNN_",
    "NCCL_",
    "NVIDIA_",
    "TRITON_",
    "MODERN_GPT_",
    "WANDB_",
    "MLFLOW_",
    "RAY_",
    "PYTHONHASHSEED",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "HOME",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
)


def _run_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(RUN_ENVIRONMENT)}


def _set_run_environment(was: dict[str, str]) -> None:
    for k in set(_run_environment()) - set(was):
        del os.environ[k]
    os.environ.update(was)


def _environment_change(was: dict[str, str], now: dict[str, str]) -> str:
    """The first changed variable, as words (the refusal names one; all are put back)."""
    k = min(k for k in set(was) | set(now) if was.get(k) != now.get(k))
    shown = {None: "unset"}
    return f"the environment variable {k} from {shown.get(was.get(k), repr(was.get(k)))} to " + shown.get(
        now.get(k), repr(now.get(k))
    )


def _restored(watched: list[tuple], before: list) -> str:
    """Everything watched put back as it was; what had changed, as words ("" for nothing)."""
    changes = []
    for (what, read, put_back), was in zip(watched, before, strict=True):
        now = read()
        if now is was or now == was:
            continue
        changes.append(
            _environment_change(was, now) if what == ENVIRONMENT else f"{what} from {_shown(was)} to {_shown(now)}"
        )
        with contextlib.suppress(Exception):  # one torch allows once (inter-op threads): refused all the same
            put_back(was)
    return " and ".join(changes)


def _shown(value) -> str:
    if isinstance(value, enum.Enum):
        return value.name  # signal.SIG_IGN
    if isinstance(value, (bool, int, float, str)) or type(value).__module__.startswith("torch"):
        return str(value)
    return getattr(value, "__qualname__", None) or f"a {type(value).__name__}"


@contextlib.contextmanager
def _guarded(where: str, when: str):
    """Run a plugin's code (its module body, or its factories, forward and backward) so that it cannot change the
    process every row's runs train in: what it changed is put back and refused by name (refused, not only put
    back, for the plugin meant it, and its runs would not be what its author thinks); a thread it starts is made a
    daemon, and one it leaves running refused; os._exit raises _Exited instead of ending the process."""
    watched, started = _watched(), []
    before = [read() for _, read, _ in watched]
    with _daemonic(started), _no_os_exit():
        try:
            yield
        finally:
            changed = _restored(watched, before)
    if changed:
        raise PluginError(
            f"the plugin {where} set {changed} {when}; a plugin may not change the process that every row's runs "
            "train in"
        )
    running = [t.name for t in started if t.is_alive()]
    if running:
        raise PluginError(
            f"the plugin {where} started the thread {running[0]!r} {when} and left it running; a thread left running "
            "would keep modern-gpt from ending (join it before the file ends, or make it a daemon)"
        )


@contextlib.contextmanager
def _daemonic(started: list):
    """Each thread that this thread starts meanwhile is made a daemon: the interpreter joins every other thread
    before it exits, so one a plugin leaves running would hang the command at its end. Those not asked to be
    daemons go into started, to be refused if still running."""
    start, me = threading.Thread.start, threading.get_ident()

    def daemon_start(thread):
        if threading.get_ident() == me and not thread.daemon:
            thread.daemon = True
            started.append(thread)
        return start(thread)

    threading.Thread.start = daemon_start
    try:
        yield
    finally:
        threading.Thread.start = start


@contextlib.contextmanager
def _no_os_exit():
    """os._exit raises _Exited in this process meanwhile (a plugin that calls it would end the command at once,
    with its code and no word); a child forked meanwhile exits as os._exit does."""
    real, pid = os._exit, os.getpid()

    def refused(code):
        if os.getpid() != pid:
            real(code)
        raise _Exited(code)

    os._exit = refused
    try:
        yield
    finally:
        os._exit = real


def _line_in(e: BaseException, path: str) -> str:
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    return f" (line {lines[-1]})" if lines else ""


def _declared(module, path: str) -> list[Component]:
    """The module's COMPONENTS, each checked: a Component with a name, a summary, a known slot and a factory,
    named like no built-in component and no other plugin's."""
    found = getattr(module, "COMPONENTS", None)
    if not isinstance(found, (list, tuple)) or not found:
        raise PluginError(f"the plugin {path} declares no COMPONENTS = [Component(...), ...] at module level")
    names = set()
    for c in found:
        why = _component_problem(c, names)
        if why:
            raise PluginError(f"the plugin {path}: {why}")
        names.add(c.name)
    return list(found)


def _component_problem(c, names: set) -> str | None:
    if not isinstance(c, Component):
        return f"{c!r} in COMPONENTS is not a modern_gpt.Component"
    if not isinstance(c.name, str) or not c.name.isidentifier():
        return f"a component has no name (a Python identifier such as relu2), got {c.name!r}"
    if not isinstance(c.summary, str) or not c.summary.strip():
        return f"component {c.name!r} has no summary (one line, 'classic piece -> yours')"
    if c.slot not in SLOTS:
        return f"component {c.name!r} has the unknown slot {c.slot!r}; the slots are {', '.join(SLOTS)}"
    if c.slot == "position" and c.applies_to not in ("embeddings", "qk"):
        return f"component {c.name!r} applies_to {c.applies_to!r}; a position applies to 'embeddings' or 'qk'"
    if not callable(c.factory):
        return f"component {c.name!r} has no factory (a callable that builds its module)"
    if c.name in COMPONENTS or c.name in ("classic", "modern"):
        return f"component {c.name!r} has the name of a built-in one; rename it"
    if c.name in PLUGINS or c.name in names:
        return f"component {c.name!r} is declared by another plugin too ({PLUGINS[c.name].source if c.name in PLUGINS else 'this file'}); rename one"
    return None


def jobs_plugins(cfg: ModelConfig) -> tuple[tuple[str, str, str], ...]:
    """(path, source, package) of each plugin a model uses: what a job carries to its worker."""
    used = {PLUGINS[n].source for n in cfg.extra_components}
    return tuple((p.path, p.source, p.package) for p in LOADED.values() if p.path in used)


def install_all(sources) -> None:
    for path, source, package in sources:
        install(path, source, package)


def records(cfgs) -> list[dict]:
    """Name and source hash of every plugin these models use, for meta.json and checkpoints."""
    used = {PLUGINS[n].source for cfg in cfgs for n in cfg.extra_components}
    return [p.record for p in LOADED.values() if p.path in used]


def check_recorded(recorded, where, read_only: bool = False) -> list[str]:
    """Each plugin a folder or checkpoint recorded, loaded with the same source: one given by --plugin (on any
    path), else its recorded file. A missing or changed file is one sentence naming it; read_only (a report,
    which needs no model), a missing file's components are stood in for by placeholders that refuse to build, and
    the missing files are returned for a footnote."""
    missing = []
    for r in recorded or []:
        if r["sha256"] in LOADED:
            continue
        names = ", ".join(r["components"])
        now = next((p for p in LOADED.values() if set(p.names) & set(r["components"])), None)
        path = now.path if now else r["path"]
        if now is None and not Path(path).is_file() and read_only:
            _stand_in(r["components"], path, where)
            missing.append(f"{path} ({names})")
            continue
        if now is None and not Path(path).is_file():
            raise PluginError(
                f"{where} was made with the plugin {path} ({names}), which is missing; put it back, or give a copy "
                "with --plugin"
            )
        source = now.source if now else read(path)
        if sha256(source) != r["sha256"]:
            raise PluginError(
                f"the plugin {path} has changed since {where} was made with it ({names}; its source's sha256 "
                "differs); put back the original"
            )
        install(path, source)
    return missing


MISSING_SLOT = "(missing)"  # the slot of a stand-in for a recorded component whose plugin file is gone


def _stand_in(names, path: str, where) -> None:
    """Register each recorded component of a missing plugin file by name, so that a folder's spec still reads
    (report needs no model); building one is the missing file's sentence."""
    text = f"{where} was made with the plugin {path}, which is missing; put it back, or give a copy with --plugin"

    def refuse(*_):
        raise PluginError(text)

    for name in names:
        if name not in PLUGINS:
            PLUGINS[name] = Component(name, f"(the plugin {path} is missing)", MISSING_SLOT, refuse, source=path)


RECORD_SCHEMA = {"file": str, "path": str, "sha256": str, "components": [str]}  # a folder's or checkpoint's


def loaded_records() -> list[dict]:
    """Name and source hash of every plugin loaded in this process, used or not, for meta.json."""
    return [p.record for p in LOADED.values()]


def files_of(cfg: ModelConfig) -> str:
    """The plugin files whose components a model uses, for a sentence ("" for none)."""
    return ", ".join(sorted({PLUGINS[n].source for n in cfg.extra_components}))


def raised_in(e: BaseException) -> str | None:
    """The plugin file an exception was raised in, if any (a forward that fails mid-run)."""
    files = {p.path for p in LOADED.values()}
    frames = [f.filename for f in traceback.extract_tb(e.__traceback__) if f.filename in files]
    return frames[-1] if frames else None


def built_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters per piece and their total counted from the built modules (on the meta device: no memory),
    which config.param_counts answers with when a plugin component is on."""
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


def check_forward(cfg: ModelConfig) -> None:
    """Build the model and run two sequences of two tokens through it, forward and backward, before any training:
    a factory that raises, a plugin module whose output has the wrong shape, one that fails in backward (an
    in-place op on a tensor autograd saved), exits, or changes the process (_guarded) is one sentence naming the
    plugin. Two of each, not one: at (1, 1) an output that drops or pools the batch or time axis has the right
    shape and then broadcasts silently in training."""
    if not cfg.extra_components:
        return
    cfg, T = replace(cfg, dropout=0.0), min(2, cfg.context)
    try:
        with _guarded(files_of(cfg), "in its factory, forward or backward"):
            logits = _forward_backward(cfg, T)
    except PluginError:
        raise
    except (Exception, SystemExit, _Exited) as e:
        text = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}".rstrip(": ")
        where = raised_in(e) or files_of(cfg)
        raise PluginError(f"the plugin {where} failed a two-token forward and backward: {text}") from e
    if tuple(logits.shape) != (2, T, cfg.vocab_size):
        raise PluginError(
            f"with the plugins {', '.join(cfg.extra_components)} two sequences of {T} tokens give logits of shape "
            f"{tuple(logits.shape)}, not (2, {T}, {cfg.vocab_size})"
        )


@contextlib.contextmanager
def guarded_run(cfg: ModelConfig):
    """A run of a row with a plugin component, guarded as the check was: a change to the process made mid-run
    (on step 50, say, long after the check's two tokens) is put back and is that run's error (a PluginError), so
    that the worker's next runs train as every other row's; os._exit is a SystemExit, the run's error too."""
    if not cfg.extra_components:
        yield
        return
    try:
        with _guarded(files_of(cfg), "while training"):
            yield
    except _Exited as e:
        raise SystemExit(e.code) from e


def _forward_backward(cfg: ModelConfig, T: int):
    """The model built (on a forked generator: the caller's draws are untouched), its shapes checked by hooks, and
    its loss on two sequences of T tokens backpropagated: the logits."""
    import torch

    from .gpt import GPT

    with torch.random.fork_rng(devices=[]):
        model = GPT(cfg)
    for module in model.modules():
        component = getattr(module, "_modern_gpt_component", None)
        if component is not None:
            module.register_forward_hook(_shape_hook(component, cfg))
    tokens = torch.zeros(2, T, dtype=torch.long)
    with torch.enable_grad():
        logits, loss = model(tokens, tokens)
        loss.backward()
    return logits.detach()


def _shape_hook(component: Component, cfg: ModelConfig):
    def hook(module, args, output):
        want, got = _expected(component, args, cfg), _shape(output)
        if want is not None and got != want:
            raise PluginError(f"{component.where} returns shape {got} where the model needs {want}")

    return hook


def _shape(output):
    """A module's output shape as tuples: (B, T, dim), or one shape per item of a (q, k) pair; None for no tensor."""
    if isinstance(output, tuple):
        return tuple(_shape(o) for o in output)
    return tuple(output.shape) if hasattr(output, "shape") else None


def _expected(component: Component, args, cfg: ModelConfig):
    if component.slot in ("norm", "mlp", "block"):
        return tuple(args[0].shape)
    if component.slot == "qk" or component.applies_to == "qk":
        return (tuple(args[0].shape), tuple(args[1].shape))
    # added to the embeddings: exactly (T, dim), for a (1, 1, dim) or a (T, 1) would broadcast without an error
    return (int(args[1]), cfg.dim)
