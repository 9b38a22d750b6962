"""The `modern-gpt` command (the console script and `python -m modern_gpt`).

Kept tiny on purpose: Ctrl-C while cli.py is compiled and typer and rich load is a quiet exit, not a traceback,
so the handler is installed here, before any of that starts. torch and pandas (a second or more) load later,
inside the commands that need them, where main()'s own handling of Ctrl-C is in place.
"""

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
    from .cli import main

    if previous is not None:
        signal.signal(signal.SIGINT, previous)
    main()


if __name__ == "__main__":
    run()
