"""Jobs for the executor tests that need no torch: a spawned worker unpickles them in a fraction of a second."""

import os
import signal
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

    def __call__(self, corpus, on_step=None) -> dict:
        if on_step is not None:
            on_step(self.row, self.seed, 1, 0.5)
        if self.raises:
            raise ValueError(f"run {self.seed} cannot start")
        if self.dies == "always" or (self.dies and not Path(self.dies).exists()):
            if self.dies != "always":
                Path(self.dies).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        env = os.environ.get(self.env) if self.env else None
        record = {"row": self.row, "seed": self.seed, "error": "", "pid": os.getpid(), "corpus": corpus}
        return {**record, "ppid": os.getppid(), "env": env}

    def failed(self, corpus, error: str) -> dict:
        return {"row": self.row, "seed": self.seed, "error": error, "pid": None, "corpus": corpus}
