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
import io
import linecache
import os
import re
import signal
import sys
import threading
import time
import tokenize
import traceback
import types
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

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
    """A plugin file's source, decoded as Python decodes it (UTF-8, a byte-order mark, or a PEP 263 coding line);
    a missing file, a folder, a FIFO or a symlink loop is one sentence naming it."""
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


def _resolved(path) -> str:
    """The absolute path of a plugin file that read() could read (a symlink loop is caught there first)."""
    try:
        return str(Path(path).expanduser().resolve())
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop, on Python before 3.13
        raise PluginError(f"cannot read the plugin {path}: {e}") from None


def load(paths=()) -> list[Plugin]:
    """Each --plugin FILE (and TOML plugins = [...]), then the installed entry points, registered."""
    out = []
    for p in paths:
        source = read(p)
        out.append(install(_resolved(p), source))
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
    except BaseException as e:
        if not _plugins_own(e, ()):
            raise
        raise PluginError(f"the installed plugin {name} {_raised(e)} while loading{_advice(e)}") from e


_INSTALLING: list[str] = []  # the plugin whose module body runs now (install), to refuse one that loads plugins


def install(path: str, source: str, package: str = "") -> Plugin:
    """Run a plugin's source as a module of its own and register its COMPONENTS; the same source twice is
    one plugin (a worker given the job's plugins again, a test). An installed package's module runs inside
    its package, so that its relative imports (from .layers import ...) resolve."""
    digest = sha256(source)
    if digest in LOADED:
        return LOADED[digest]
    if _INSTALLING:
        raise PluginError(
            f"the plugin {_INSTALLING[-1]} loads a plugin ({path}) while loading; a plugin declares "
            "components, and modern-gpt loads the files given to it"
        )
    code = _compiled(source, path)
    module = types.ModuleType(f"modern_gpt_plugin_{Path(path).stem}_{digest[:12]}")
    module.__file__ = path
    module.__package__ = package or None
    sys.modules[module.__name__] = module  # dataclasses and pickle look a class's module up there
    _INSTALLING.append(path)
    try:
        _run(code, module, path)
        with _guarded(path, "while its COMPONENTS were read"):
            components = [replace(c, source=path) for c in _declared(module, path)]
    except BaseException as e:
        sys.modules.pop(module.__name__, None)
        if isinstance(e, PluginError) or not _plugins_own(e, (path,)):
            raise
        raise PluginError(f"the plugin {path}: reading its COMPONENTS {_raised(e)}{_advice(e)}") from e
    finally:
        _INSTALLING.pop()
    for c in components:
        PLUGINS[c.name] = c
    plugin = Plugin(path, source, digest, tuple(c.name for c in components), package)
    LOADED[digest] = plugin
    return plugin


def _compiled(source: str, path: str):
    """The plugin's code; a syntax error is one sentence with its line, and so is a source Python cannot compile
    (a null byte, nesting too deep for the parser, too large for memory)."""
    try:
        return compile(source, path, "exec")
    except SyntaxError as e:
        line = f" on line {e.lineno}" if e.lineno else ""
        raise PluginError(f"the plugin {path} has a syntax error{line}: {e.msg}") from e
    except (ValueError, RecursionError, MemoryError) as e:
        raise PluginError(f"the plugin {path} cannot be compiled: {type(e).__name__}: {e}") from e


def _run(code, module, path: str) -> None:
    """The plugin's module body, guarded: an error, or an exit, is one sentence naming the file and its line."""
    try:
        with _guarded(path, "while loading"):
            exec(code, module.__dict__)
    except PluginError:
        raise
    except BaseException as e:  # an exit too: else the command ends, silently, with its code
        if not _plugins_own(e, (path,)):
            raise  # the user's Ctrl-C (or SIGTERM) while it loads
        raise PluginError(f"the plugin {path} {_raised(e)} while loading{_line_in(e, path)}{_advice(e)}") from e


def _plugins_own(e: BaseException, paths) -> bool:
    """Whether the plugin's code raised e (and not the user, nor modern-gpt): any exception but KeyboardInterrupt;
    a KeyboardInterrupt only when its innermost frame is a plugin's (in paths, or loaded) at a raise statement,
    for Ctrl-C (and SIGTERM, which modern-gpt's handler turns into one) interrupts whatever line runs."""
    if not isinstance(e, KeyboardInterrupt):
        return True
    frames = traceback.extract_tb(e.__traceback__)
    if not frames or frames[-1].filename not in {*paths, *(p.path for p in LOADED.values())}:
        return False
    return _source_line(frames[-1].filename, frames[-1].lineno).lstrip().startswith("raise")


def _source_line(path: str, lineno: int | None) -> str:
    """A line of a plugin's source: from the loaded copy (a worker may not have the file), else the file."""
    plugin = next((p for p in LOADED.values() if p.path == path), None)
    if plugin is None or not lineno:
        return linecache.getline(path, lineno or 0)
    lines = plugin.source.splitlines()
    return lines[lineno - 1] if 0 < lineno <= len(lines) else ""


def _raised(e: BaseException) -> str:
    if isinstance(e, _Exited):
        return f"called os._exit({e.code})"
    if isinstance(e, SystemExit):
        return f"raised SystemExit({e.code!r})"
    return f"raised {type(e).__name__}: {e}".rstrip(": ")


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


class _Watch(NamedTuple):
    """One thing of the process a plugin may not change: read() now, put_back(was), and change(was, now): the
    change as words ("" for none; by default: what from was to now, for a value that is not the one read before)."""

    what: str
    read: Callable
    put_back: Callable
    change: Callable | None = None


def _watched(copies: dict) -> list[_Watch]:
    """What a run depends on that a plugin's code can change for the whole process: every row's numbers (dtype,
    grad mode, autocast, threads, device, the algorithms and matmul precision, the functions torch and modern-gpt
    call, the module hooks, numpy's error handling), where the results land (the working folder), what the user
    sees (stdout, stderr, their file descriptors and encoding), Ctrl-C and alarms (the signal handlers), the
    components registered and the environment variables a run reads (RUN_ENVIRONMENT). copies: a duplicate of
    file descriptors 0, 1 and 2, to put each back from."""
    import torch

    w = _Watch
    watched = [
        w("torch's default dtype", torch.get_default_dtype, torch.set_default_dtype),
        w("grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
        w("autocast", _autocast, _set_autocast, _autocast_change),
        w("the working folder", _cwd, os.chdir),
        w("torch's threads", torch.get_num_threads, torch.set_num_threads),
        w("torch's inter-op threads", torch.get_num_interop_threads, torch.set_num_interop_threads),
        w("deterministic algorithms", torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
        w("float32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        w("the recursion limit", sys.getrecursionlimit, sys.setrecursionlimit, _recursion_lowered),
        w(ENVIRONMENT, _run_environment, _set_run_environment, _environment_change),
        w("a hook of every torch module", _module_hooks, _set_module_hooks, _hooks_change),
        w("sys.modules", partial(dict, sys.modules), _put_modules_back, _modules_change),
        w("an alarm (signal.alarm)", _alarm, _put_alarm_back, _alarm_change),
        *_stream_watches(copies),
        *_registry_watches(),
    ]
    if hasattr(torch, "get_default_device"):  # torch 2.3 and later
        watched.append(w("torch's default device", lambda: str(torch.get_default_device()), _set_default_device))
    if "numpy" in sys.modules:
        np = sys.modules["numpy"]
        watched.append(w("numpy's error handling (np.seterr)", np.geterr, lambda was: np.seterr(**was)))
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM"):
        if hasattr(signal, name):
            number = getattr(signal, name)
            watched.append(
                w(f"the handler of {name}", partial(signal.getsignal, number), partial(signal.signal, number))
            )
    watched.append(w("a function", _fingerprint, _put_functions_back, _functions_change))
    return watched


ENVIRONMENT = "the environment"
AUTOCAST_DEVICES = ("cpu", "cuda")


def _autocast() -> tuple:
    import torch

    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES)


def _autocast_change(what: str, was: tuple, now: tuple) -> str:
    on = [
        f"{d} ({dtype})" for (d, enabled, dtype), before in zip(now, was, strict=True) if (d, enabled, dtype) != before
    ]
    return f"{what} (torch.autocast entered, not left) for {', '.join(on)}" if on else ""


def _set_autocast(was: tuple) -> None:
    import torch

    for device, enabled, dtype in was:
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)


MODULE_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
    "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
    "_global_buffer_registration_hooks",
)


def _module_hooks() -> dict:
    """Every hook torch.nn.modules.module keeps for all modules (register_module_forward_hook and its kin)."""
    from torch.nn.modules import module

    return {name: dict(getattr(module, name)) for name in MODULE_HOOKS if hasattr(module, name)}


def _hooks_change(what: str, was: dict, now: dict) -> str:
    changed = [name for name in was if was[name] != now.get(name)]
    return f"{what} (torch.nn.modules.module.{changed[0]})" if changed else ""


def _set_module_hooks(was: dict) -> None:
    from torch.nn.modules import module

    for name, hooks in was.items():
        getattr(module, name).clear()
        getattr(module, name).update(hooks)


def _stream_watches(copies: dict) -> list[_Watch]:
    """sys.stdout and sys.stderr (the objects, and their encoding), and file descriptors 0, 1 and 2 (a plugin
    that points one elsewhere, with os.dup2 or os.close, would silence or redirect the command)."""
    out = []
    for name in ("stdout", "stderr"):
        out.append(_Watch(f"sys.{name}", partial(getattr, sys, name), partial(setattr, sys, name), _stream_change))
        out.append(_Watch(f"the encoding of sys.{name}", partial(_encoding, name), partial(_set_encoding, name)))
    for fd in copies:
        out.append(_Watch(f"file descriptor {fd}", partial(_fd, fd), partial(_put_fd_back, fd, copies), _fd_change))
    return out


def _stream_change(what: str, was, now) -> str:
    return "" if now is was else f"{what} to another stream"


def _encoding(name: str) -> tuple:
    stream = getattr(sys, name)
    return getattr(stream, "encoding", None), getattr(stream, "errors", None)


def _set_encoding(name: str, was: tuple) -> None:
    getattr(sys, name).reconfigure(encoding=was[0], errors=was[1])


def _fd(fd: int) -> tuple | None:
    """What a file descriptor is open on (its device and inode), or None for a closed one."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _fd_change(what: str, was, now) -> str:
    if was == now:
        return ""
    return f"{what} to {'closed (os.close)' if now is None else 'another file (os.dup2)'}"


def _put_fd_back(fd: int, copies: dict, was) -> None:
    if copies[fd] is None:
        os.close(fd)  # closed before too
    else:
        os.dup2(copies[fd], fd)


def _fd_copies() -> dict:
    copies = {}
    for fd in (0, 1, 2):
        try:
            copies[fd] = os.dup(fd)
        except OSError:
            copies[fd] = None
    return copies


def _close(copies: dict) -> None:
    for copy in copies.values():
        if copy is not None:
            os.close(copy)


def _registry_watches() -> list[_Watch]:
    """The components registered (a plugin's own are registered by the loader, after its body has run)."""
    from ..core import components

    out = []
    for name in ("PLUGINS", "COMPONENT_SUMMARY", "SLOTS", "SLOT_SIGNATURES"):
        table = getattr(components, name)
        out.append(_Watch(f"the component registry ({name})", partial(dict, table), partial(_refill, table)))
    return out


def _refill(table: dict, was: dict) -> None:
    table.clear()
    table.update(was)


def _modules_change(what: str, was: dict, now: dict) -> str:
    """An entry of sys.modules set to None (which makes importing it fail); a new module imported is fine."""
    blocked = sorted(k for k, v in now.items() if v is None and was.get(k, 0) is not None)
    return f"sys.modules[{blocked[0]!r}] to None (an import blocked)" if blocked else ""


def _put_modules_back(was: dict) -> None:
    for k in [k for k, v in sys.modules.items() if v is None and was.get(k, 0) is not None]:
        if k in was:
            sys.modules[k] = was[k]
        else:
            del sys.modules[k]


def _alarm() -> tuple[float, float]:
    """The seconds until a pending alarm (signal.alarm, signal.setitimer) goes off (0 for none), and when read."""
    left = signal.getitimer(signal.ITIMER_REAL)[0] if hasattr(signal, "getitimer") else 0.0
    return left, time.monotonic()


def _alarm_due(was: tuple[float, float]) -> float:
    """When an alarm pending before would go off now (0: none was)."""
    return max(was[0] - (time.monotonic() - was[1]), 1e-3) if was[0] > 0 else 0.0


def _alarm_change(what: str, was: tuple, now: tuple) -> str:
    """An alarm set, moved or cancelled (one pending before, a test runner's timeout say, is put back)."""
    due = _alarm_due(was)
    if (now[0] > 0) == (due > 0) and abs(now[0] - due) < 0.5:
        return ""
    return f"a pending alarm (signal.alarm) of {now[0]:.0f} s" if now[0] > 0 else "signal.alarm(0), cancelling an alarm"


def _put_alarm_back(was: tuple) -> None:
    signal.setitimer(signal.ITIMER_REAL, _alarm_due(was))


def _spaces() -> list:
    """What a plugin could patch a function of: torch, torch.nn.functional, torch.nn.init, torch.Tensor and every
    loaded module of modern-gpt."""
    import torch
    import torch.nn.functional
    import torch.nn.init

    from . import gpt  # noqa: F401  (the model's module loaded before the plugin is: its names are checked)

    ours = [m for name, m in list(sys.modules.items()) if name.startswith("modern_gpt.") and m is not None]
    return [torch, torch.nn.functional, torch.nn.init, torch.Tensor, *ours]


def _fingerprint() -> list:
    """(namespace, its names and values): torch's and torch.nn's public ones, each modern-gpt module's globals
    and torch.Tensor's class dict (there a new name too is a patch: it shadows a method of torch's C base)."""
    import torch

    out = []
    for space in _spaces():
        names = vars(space)
        if space is torch.Tensor or space.__name__.startswith("modern_gpt."):
            out.append((space, dict(names)))
        else:
            out.append((space, {k: v for k, v in names.items() if k[0] != "_"}))
    return out


def _patched(was: list) -> list[tuple]:
    """(namespace, name, its value before or _MISSING, now or _MISSING) of each name rebound since was."""
    import torch

    out = []
    for space, before in was:
        names = vars(space)
        for k, v in before.items():
            now = names.get(k, _MISSING)
            if now is not v and not _torchs_own_wrapper(v, now):
                out.append((space, k, v, now))
        if space is torch.Tensor and len(names) != len(before):
            out.extend((space, k, _MISSING, v) for k, v in names.items() if k not in before)
    return out


_MISSING = object()


def _torchs_own_wrapper(before, now) -> bool:
    """torch's own rewrapping of its function as it imports more of itself (torch._dynamo wraps torch.manual_seed
    in torch._disable_dynamo on its first import, mid-run): the old function, wrapped by code in torch's files."""
    import torch

    code = getattr(now, "__code__", None)
    torch_files = os.path.dirname(torch.__file__) + os.sep
    return getattr(now, "__wrapped__", None) is before and code is not None and code.co_filename.startswith(torch_files)


def _functions_change(what: str, was: list, now: list) -> str:
    patched = sorted(_patched(was), key=lambda p: p[1].startswith("__"))  # a reload's __doc__ last
    if not patched:
        return ""
    space, name, before, after = patched[0]
    more = f" (and {len(patched) - 1} more names)" if len(patched) > 1 else ""
    after = "nothing (deleted)" if after is _MISSING else _shown(after)
    after = "another of that name (a reload?)" if after == _shown(before) else after
    return f"{getattr(space, '__module__', '') + '.' if isinstance(space, type) else ''}{space.__name__}.{name} from {_shown(before)} to {after}{more}"


def _put_functions_back(was: list) -> None:
    for space, name, before, _ in _patched(was):
        if before is _MISSING:
            delattr(space, name)
        else:
            setattr(space, name, before)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under this process: nothing a plugin changed
        return None


def _set_default_device(device: str) -> None:
    import torch

    torch.set_default_device(None if device == "cpu" else device)  # cpu: none set, as torch starts


# The environment variables a run reads, through torch and its math libraries (threads, devices, allocators,
# compilers), the trackers, Ray or modern-gpt itself, and the terminal's size (COLUMNS, LINES: what the progress
# and the tables are drawn to); a worker starts with the driver's environment, so a plugin that sets one changes
# every row's runs. Other variables are the plugin's own business: libraries set some as they import
# (scikit-learn's KMP_DUPLICATE_LIB_OK, MLflow's telemetry id).
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
    "COLUMNS",
    "LINES",
)


# Where torch's compiler keeps its files: torch, Triton and modern-gpt's own compiling.share_cache set these as
# the first compiled step runs (a plugin row's, inside its guard); where files go, not what a run computes.
COMPILER_CACHES = re.compile(r"(TORCHINDUCTOR|TRITON)_\w*(CACHE|DIR|HOME)")


def _run_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(RUN_ENVIRONMENT) and not COMPILER_CACHES.match(k)}


def _recursion_lowered(what: str, was: int, now: int) -> str:
    """A lower recursion limit breaks deep code (a RecursionError in the table); a higher one harms nothing, and
    torch's compiler raises it to 2000 as it compiles a plugin row's first step: not a change refused."""
    return "" if now >= was else _change(what, was, now)


def _set_run_environment(was: dict[str, str]) -> None:
    for k in set(_run_environment()) - set(was):
        del os.environ[k]
    os.environ.update(was)


def _environment_change(what: str, was: dict[str, str], now: dict[str, str]) -> str:
    """The first changed variable, as words (the refusal names one; all are put back)."""
    changed = [k for k in set(was) | set(now) if was.get(k) != now.get(k)]
    if not changed:
        return ""
    k, shown = min(changed), {None: "unset"}
    return f"the environment variable {k} from {shown.get(was.get(k), repr(was.get(k)))} to " + shown.get(
        now.get(k), repr(now.get(k))
    )


def _restored(watched: list[_Watch], before: list) -> str:
    """Everything watched put back as it was; what had changed, as words ("" for nothing)."""
    changes = []
    for watch, was in zip(watched, before, strict=True):
        now = watch.read()
        if watch.change is not None:
            words = watch.change(watch.what, was, now)
        else:
            words = "" if now is was or now == was else _change(watch.what, was, now)
        if not words:
            continue
        changes.append(words)
        with contextlib.suppress(Exception):  # one torch allows once (inter-op threads): refused all the same
            watch.put_back(was)
    return " and ".join(changes)


def _change(what: str, was, now) -> str:
    """A watched value's change as words: a table's (a dict's) first changed key, else from one value to the other."""
    if isinstance(was, dict) and isinstance(now, dict):
        k = min((k for k in was.keys() | now.keys() if was.get(k, _MISSING) != now.get(k, _MISSING)), key=str)
        return f"{what} ({k}) from {_shown(was.get(k, 'unset'))} to {_shown(now.get(k, 'unset'))}"
    return f"{what} from {_shown(was)} to {_shown(now)}"


def _shown(value) -> str:
    if isinstance(value, enum.Enum):
        return value.name  # signal.SIG_IGN
    if isinstance(value, str):
        text = " ".join(value.split())
        return text if len(text) <= 80 else f"{text[:77]}..."
    if isinstance(value, (bool, int, float, tuple)) or type(value).__module__.startswith("torch"):
        return str(value)
    return getattr(value, "__qualname__", None) or f"a {type(value).__name__}"


class _Guard:
    """One guarded stretch of a plugin's code: the threads it started (made daemons), and the forks it made."""

    def __init__(self, where: str):
        self.pid, self.started, self.forks = os.getpid(), [], 0
        # the plugins' files: a thread or fork is the plugin's only where one of them is on the stack (torch's
        # own, a compile pool's say, are torch's business)
        self.files = frozenset({*where.split(", "), *(p.path for p in LOADED.values())})


_GUARDS: dict[int, _Guard] = {}  # thread ident -> its guard, while it runs a plugin's code
LEFT_RUNNING: list[str] = []  # the threads a refused plugin left running (a pool's are joined at exit)
_REAL_EXIT = os._exit


@contextlib.contextmanager
def _guarded(where: str, when: str):
    """Run a plugin's code (its module body, or its factories, forward and backward) so that it cannot change the
    process every row's runs train in: what it changed is put back and refused by name (refused, not only put
    back, for the plugin meant it, and its runs would not be what its author thinks); a thread it starts, or one
    started by such a thread, is made a daemon, and one it leaves running refused; os._exit raises _Exited
    instead of ending the process, and a fork is refused (the child leaves at once when it returns here)."""
    me, guard, copies = threading.get_ident(), _Guard(where), _fd_copies()
    watched = _watched(copies)
    before, children = [w.read() for w in watched], _children()
    outer, _GUARDS[me] = _GUARDS.get(me), guard
    try:
        with _no_os_exit(), _alarm_raises(where, when):
            yield
    finally:
        if os.getpid() != guard.pid:  # a child forked by the plugin's code, back in modern-gpt's: it ends here
            _REAL_EXIT(0)
        if outer is None:
            del _GUARDS[me]
        else:
            _GUARDS[me] = outer
        changed = _restored(watched, before)
        _close(copies)
    _refuse(where, when, changed, guard, children)


def _planted(files: frozenset) -> list[str]:
    """modern-gpt's names bound to a function of the plugin's files: a patch of a module the plugin imported
    first (the fingerprint knows only the modules loaded before it; modern_gpt.verdict.stats, say)."""
    out = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("modern_gpt.") or module is None:
            continue
        for key, value in list(vars(module).items()):
            code = getattr(value, "__code__", None)
            if code is not None and code.co_filename in files:
                out.append(f"{name}.{key}")
    return out


def _refuse(where: str, when: str, changed: str, guard: _Guard, children: set) -> None:
    """What a guarded stretch of a plugin's code did to the process, refused in one sentence naming the plugin."""
    planted = _planted(guard.files)
    if planted:
        changed = " and ".join(filter(None, [changed, f"{planted[0]} to a function of its own"]))
    if changed:
        raise PluginError(
            f"the plugin {where} set {changed} {when}; a plugin may not change the process that every row's runs "
            "train in"
        )
    if guard.forks:
        for child in _children() - children:  # multiprocessing's: else its exit handler would wait for them
            child.terminate()
        raise PluginError(
            f"the plugin {where} forked a child process (os.fork, multiprocessing) {when}; a plugin may not start "
            "processes of modern-gpt's (they would share its files and outlive it)"
        )
    running = [t.name for t in guard.started if t.is_alive()]
    if running:
        LEFT_RUNNING.extend(running)  # __main__'s watchdog then ends the process soon, without a second word
        raise PluginError(
            f"the plugin {where} started the thread {running[0]!r} {when} and left it running; a thread left running "
            "would keep modern-gpt from ending (join it before the file ends, or make it a daemon)"
        )


def _children() -> set:
    """multiprocessing's child processes now alive (none when it is not imported)."""
    mp = sys.modules.get("multiprocessing")
    return set(mp.active_children()) if mp is not None else set()


def _plugins_doing(guard: _Guard) -> bool:
    """Whether the plugin's code (a frame of its files on this thread's stack, or a thread it started) does what
    is being done now: a fork or a thread torch's own code starts mid-run is not the plugin's."""
    if getattr(threading.current_thread(), "_modern_gpt_started", None) is not None:
        return True
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in guard.files:
            return True
        frame = frame.f_back
    return False


def _forked_in_parent() -> None:
    for guard in list(_GUARDS.values()):
        if _plugins_doing(guard):
            guard.forks += 1


def _forked_in_child() -> None:
    """A child forked while a plugin's code ran: Ctrl-C and SIGTERM end it quietly (modern-gpt's handlers would
    print its traceback), and it ends when it returns to the guard (_guarded)."""
    if _GUARDS:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            if hasattr(signal, name):
                with contextlib.suppress(Exception):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_parent=_forked_in_parent, after_in_child=_forked_in_child)


def _thread_start(thread) -> None:
    """threading.Thread.start while plugins are loaded: a thread started by a plugin's code, or by a thread that
    code started (at once or later), is made a daemon, so that the interpreter does not wait for it at the end;
    one not asked to be a daemon goes into its guard's started, to be refused if still running."""
    guard = _GUARDS.get(threading.get_ident())
    if guard is not None and not _plugins_doing(guard):
        guard = None  # torch's own thread, started while a plugin row trains
    started = guard.started if guard is not None else getattr(threading.current_thread(), "_modern_gpt_started", None)
    if started is not None:
        thread._modern_gpt_started = started
        if not thread.daemon:
            thread.daemon = True
            started.append(thread)
    return _THREAD_START(thread)


_THREAD_START = threading.Thread.start
threading.Thread.start = _thread_start


@contextlib.contextmanager
def _no_os_exit():
    """os._exit raises _Exited meanwhile, in this process (a plugin that calls it would end the command at once,
    with its code and no word); outside a guard, or in a forked child, it is the real one (an exit handler the
    plugin registered with it runs after the guard)."""
    real = os._exit

    def refused(code):
        if not _GUARDS or os.getpid() != pid:
            return _REAL_EXIT(code)
        raise _Exited(code)

    pid, os._exit = os.getpid(), refused
    try:
        yield
    finally:
        os._exit = real


@contextlib.contextmanager
def _alarm_raises(where: str, when: str):
    """An alarm a plugin sets going off meanwhile is its error (SIGALRM's default ends the process, exit 142)."""
    main = threading.current_thread() is threading.main_thread()
    if not main or not hasattr(signal, "SIGALRM") or signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL:
        yield
        return

    def rang(signum, frame):
        raise PluginError(f"the plugin {where} set an alarm (signal.alarm) that went off {when}")

    signal.signal(signal.SIGALRM, rang)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGALRM) is rang:  # else the plugin's own handler: refused (_watched)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _line_in(e: BaseException, path: str) -> str:
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    return f" (line {lines[-1]})" if lines else ""


def _declared(module, path: str) -> list[Component]:
    """The module's COMPONENTS, each checked: a Component with a name, a summary, a known slot and a factory,
    named like no built-in component and no other plugin's; each copied into a plain Component (the loader
    reads a subclass's fields once, here: one that raises is the plugin's error, as install says)."""
    found = getattr(module, "COMPONENTS", None)
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
        return f"a component has no name (an ASCII Python identifier such as relu2), got {_named(c.name)}"
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


def _named(name) -> str:
    """A refused name as shown: a look-alike (fullwidth letters, say) with what it reads as."""
    if type(name) is not str:
        return f"a {type(name).__name__}"
    plain = unicodedata.normalize("NFKC", name)
    taken = plain in COMPONENTS or plain in PLUGINS or plain in ("classic", "modern")
    return f"{name!r}, which reads as {plain!r}, a component's name" if taken and plain != name else repr(name)


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
    except BaseException as e:
        if not _plugins_own(e, ()):
            raise  # the user's Ctrl-C
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
    that the worker's next runs train as every other row's; os._exit is a SystemExit, the run's error too, and
    so is any other BaseException the plugin's own code raises (a KeyboardInterrupt at its raise statement, a
    GeneratorExit, a class of its own), named; one raised elsewhere (the user's Ctrl-C, a worker's control
    exceptions) passes through. Running out of memory in the plugin's code is named too (_oom_named)."""
    if not cfg.extra_components:
        yield
        return
    try:
        with _guarded(files_of(cfg), "while training"), _oom_named():
            yield
    except _Exited as e:
        raise SystemExit(e.code) from e
    except (Exception, SystemExit):
        raise  # the run's error (running.run_error)
    except BaseException as e:
        plugin = _innermost_plugin(e)
        if plugin is None or not _plugins_own(e, ()):
            raise
        raise PluginError(f"the plugin {plugin} {_raised(e)} while training") from e


@contextlib.contextmanager
def guarded_train(cfg: ModelConfig):
    """`modern-gpt train`'s one run, guarded as an ablation's (guarded_run): what the plugin's code raises, or an
    exit, is one sentence naming the plugin (there is no next run to go on with), not the command's end with its
    code, nor a traceback."""
    try:
        with guarded_run(cfg):
            yield
    except PluginError:
        raise
    except (Exception, SystemExit) as e:
        where = raised_in(e) or (files_of(cfg) if isinstance(e, SystemExit) and cfg.extra_components else None)
        if where is None:
            raise
        raise PluginError(f"the plugin {where} {_raised(e)} while training; no checkpoint was written") from e


def _innermost_plugin(e: BaseException) -> str | None:
    """The plugin file e was raised in by the plugin's own frame (the traceback's innermost), if any."""
    frames = traceback.extract_tb(e.__traceback__)
    files = {p.path for p in LOADED.values()}
    return frames[-1].filename if frames and frames[-1].filename in files else None


@contextlib.contextmanager
def _oom_named():
    """Running out of memory is a run's recorded outcome (train.oom_error); meanwhile, one raised in a plugin's
    code (its own MemoryError, or torch's in its forward) names the plugin in the record's error."""
    train = sys.modules.get("modern_gpt.run.train")
    real = getattr(train, "oom_error", None)
    if real is None:
        yield
        return

    def named(e, step, device):
        text, plugin = real(e, step, device), raised_in(e)
        return text.replace(f"at step {step}:", f"at step {step} in the plugin {plugin}:", 1) if plugin else text

    train.oom_error = named
    try:
        yield
    finally:
        train.oom_error = real  # before the guard compares train's functions


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
