"""The `modern-gpt` command (the console script and `python -m modern_gpt`).

Kept tiny on purpose: Ctrl-C while cli.py is compiled and typer and rich load is a quiet exit, not a traceback,
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
        if threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # the command has said its last word: a signal while the
                if hasattr(signal, name):  # exit handlers run is a quiet exit, never their traceback
                    signal.signal(getattr(signal, name), _interrupted_while_leaving)
        raise


_exit_code: list = []


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
