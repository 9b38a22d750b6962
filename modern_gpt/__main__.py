"""The `modern-gpt` command (the console script and `python -m modern_gpt`).

Kept tiny on purpose: Ctrl-C while cli/commands.py is compiled and typer and rich load is a quiet exit, not a traceback,
so the handler is installed here, before any of that starts. torch and pandas (a second or more) load later,
inside the commands that need them, where main()'s own handling of Ctrl-C is in place.
"""

import atexit
import os
import signal
import sys
import threading


def _interrupted_at_start(signum, frame) -> None:
    # An exception raised here could surface inside a C extension's import, as a traceback: leave at once
    # instead (nothing has been written yet).
    print("modern-gpt: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def run() -> None:
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, _interrupted_at_start)
    atexit.register(_leave)  # the first exit handler registered is the last to run
    from .cli.commands import main

    if previous is not None:
        signal.signal(signal.SIGINT, previous)
    try:
        main()
    except SystemExit as e:  # main() always ends so, with the command's exit code
        _exit_code.append(e.code)
        _watch_the_end(e.code if isinstance(e.code, int) else int(e.code is not None))
        if threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # the command has said its last word: a signal while the
                if hasattr(signal, name):  # exit handlers run is a quiet exit, never their traceback
                    signal.signal(getattr(signal, name), _interrupted_while_leaving)
        raise


_exit_code: list = []


# How long the process may take to end once main() has said its last word: threads joined, exit handlers run.
# W&B's teardown (its service process waits up to 30 s for its upload) and MLflow's flush fit in it with room;
# what is still running after it (a plugin's thread, exit handler or child process) is named, and the process
# leaves with the command's exit code. MODERN_GPT_EXIT_WAIT (seconds) sets it: the tests' hangs wait less.
EXIT_WAIT = 60.0


def _watch_the_end(code: int) -> None:
    try:
        wait = float(os.environ.get("MODERN_GPT_EXIT_WAIT") or EXIT_WAIT)
    except ValueError:
        wait = EXIT_WAIT
    plugins = sys.modules.get("modern_gpt.model.plugins")
    refused = bool(getattr(plugins, "LEFT_RUNNING", None))  # the command's last word named the plugin's thread
    if refused:
        wait = min(wait, REFUSED_WAIT)
    args = (wait, code, refused)
    threading.Thread(target=_watchdog, args=args, name="modern-gpt: the end's watchdog", daemon=True).start()


REFUSED_WAIT = 2.0  # a plugin refused for a thread it left running: that thread would be joined for ever


def _watchdog(wait: float, code: int, quiet: bool = False) -> None:
    import time

    time.sleep(wait)
    if quiet:  # already said, in the command's one sentence
        os._exit(code)
    print(
        f"modern-gpt: {_still_running()} was still running {wait:g} s after the command ended; modern-gpt "
        f"left without waiting for it{_plugins_loaded()}.",
        file=sys.stderr,
        flush=True,
    )
    os._exit(code)


def _still_running() -> str:
    """What keeps the process from ending: a thread the interpreter joins, a child process, or an exit handler."""
    pool = sys.modules.get("concurrent.futures.thread")
    joined = set(getattr(pool, "_threads_queues", {})) if pool else set()
    me = threading.current_thread()
    threads = [
        t.name
        for t in threading.enumerate()
        if t.is_alive() and t is not me and t is not threading.main_thread() and (not t.daemon or t in joined)
    ]
    if threads:
        return f"the thread {threads[0]!r}"
    mp = sys.modules.get("multiprocessing")
    children = mp.active_children() if mp else []
    if children:
        return f"the child process {children[0].name!r} (pid {children[0].pid})"
    return "an exit handler (atexit)"


def _plugins_loaded() -> str:
    plugins = sys.modules.get("modern_gpt.model.plugins")
    paths = [p.path for p in getattr(plugins, "LOADED", {}).values()]
    return f" (the plugins loaded: {', '.join(paths)})" if paths else ""


def _interrupted_while_leaving(signum, frame) -> None:
    # Ctrl-C held down, or pressed again, after main() has printed its result or its "interrupted" line: raised
    # here, the KeyboardInterrupt would surface in whichever exit handler runs as a traceback. Leave at once.
    os._exit(130)


def _leave() -> None:
    """The command's very last step, after every other exit handler (a tracker's included) has run and every
    thread has been joined: the workers' fork server is stopped (executors.stop_server; it holds this command's
    stdout and stderr, so that a pipe reading them would wait for its teardown), and the process exits without
    the interpreter's teardown of its modules, which takes about 0.6 s once torch is loaded (measured on this
    project's 2-core machine). Nothing is left to write by then: every file the command writes is closed."""
    executors = sys.modules.get("modern_gpt.ablation.executors.local")
    if executors is not None:
        executors.stop_server()
    if not _exit_code or not isinstance(_exit_code[0], int | None):
        return  # not main()'s own exit (an uncaught exception): the usual teardown
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a closed stream: nothing more can reach it
            pass
    os._exit(_exit_code[0] or 0)


if __name__ == "__main__":
    run()
