"""Jobs for the executor tests that need no torch: a spawned worker unpickles them in a fraction of a second."""

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FakeJob:
    """A run that reports a step and returns a small record, or kills its own process (always, or the first
    time only: `dies` is then a file that exists once it has died), or raises an error."""

    row: int
    seed: int
    dies: str = ""  # "" never, "always", or a path: dies unless the path exists
    raises: bool = False
    env: str = ""  # an environment variable whose value the record carries
    kills_server: str = ""  # a path: unless it exists, kill the fork server (this process's parent), then go on

    def __call__(self, corpus, on_step=None) -> dict:
        if on_step is not None:
            on_step(self.row, self.seed, 1, 0.5)
        if self.raises:
            raise ValueError(f"run {self.seed} cannot start")
        if self.dies == "always" or (self.dies and not Path(self.dies).exists()):
            if self.dies != "always":
                Path(self.dies).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kills_server and not Path(self.kills_server).exists():
            Path(self.kills_server).touch()
            os.kill(os.getppid(), signal.SIGKILL)
            for step in range(2, 40):  # a run still in progress, reporting steps, for a few seconds
                time.sleep(0.1)
                on_step(self.row, self.seed, step, 0.5)
        env = os.environ.get(self.env) if self.env else None
        record = {"row": self.row, "seed": self.seed, "error": "", "pid": os.getpid(), "corpus": corpus}
        return {**record, "ppid": os.getppid(), "env": env}

    def failure_record(self, corpus, error: str) -> dict:
        return {"row": self.row, "seed": self.seed, "error": error, "pid": None, "corpus": corpus}


@dataclass(frozen=True)
class SignalsDriver:
    """Part of a corpus: unpickled in a worker as it starts, it sends the driver a signal while the driver is still
    writing the rest of the corpus to that worker (a Ctrl-C or SIGTERM just as the workers start)."""

    pid: int
    signum: int

    def __reduce__(self):
        return os.kill, (self.pid, self.signum)
