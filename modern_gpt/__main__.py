"""The `modern-gpt` command (the console script and `python -m modern_gpt`).

Kept tiny on purpose: Ctrl-C while the CLI's modules load is a quiet exit, not a traceback, so the handler is
installed here, before any of that starts; torch and pandas load later, inside the commands that need them.
"""

import atexit
import os
import signal
import sys
import threading


def _interrupted(signum, frame) -> None:
    # An exception raised here could surface inside a C extension's import, or an exit handler, as a traceback.
    if not _exit_code:
        print("modern-gpt: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def run() -> None:
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _interrupted) if main_thread else None
    atexit.register(_leave)  # the first exit handler registered is the last to run
    from .cli.commands import main

    if previous is not None:
        signal.signal(signal.SIGINT, previous)
    try:
        main()
    except SystemExit as e:  # main() always ends so, with the command's exit code
        _exit_code.append(e.code)
        for name in ("SIGINT", "SIGTERM", "SIGHUP") if main_thread else ():  # the command has said its last
            if hasattr(signal, name):  # word: a signal while the exit handlers run is a quiet exit
                signal.signal(getattr(signal, name), _interrupted)
        raise


_exit_code: list = []


def _leave() -> None:
    """The last step, after every other exit handler: stop the workers' fork server (it holds this command's
    stdout and stderr), then exit without the interpreter's teardown of torch (about 0.6 s)."""
    executors = sys.modules.get("modern_gpt.ablation.executors.local")
    if executors is not None:
        executors.stop_server()
    if not _exit_code or not isinstance(_exit_code[0], int | None):
        return  # not main()'s own exit (an uncaught exception): the usual teardown
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(_exit_code[0] or 0)


if __name__ == "__main__":
    run()
