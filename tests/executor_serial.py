"""A third executor, for tests/executors/test_executors.py's registry test: every run in this process, one after another,
newest seed first. It is this one file plus one line in core.config.EXECUTORS (the test adds the line)."""


class Serial:
    local_memory = True  # its runs train on this machine

    def __init__(self, options, threads: int, device: str):
        self.device, self.ran = device, 0

    @staticmethod
    def device_of(name: str, options) -> str:
        return "cpu"

    @staticmethod
    def threads(options, device: str) -> int:
        return 1

    @staticmethod
    def prestart(options, runs: int) -> None:
        pass

    def at_once(self, pending: int) -> int:
        return 1

    def run(self, jobs, corpus, on_step, on_record) -> None:
        for job in sorted(jobs, key=lambda j: (-j.seed, j.row)):  # another order than Local's: the folder is the same
            on_record(job(corpus, on_step))
            self.ran += 1

    def info(self) -> dict:
        return {"name": "serial", "ran": self.ran}

    def device_name(self) -> None:
        return None

    def close(self) -> None:
        pass


class Detaching(Serial):
    """Serial, except that the first run() of the process hands its runs over (--detach) untrained, as Slurm's does
    once its array is submitted; a resume then trains them."""

    handed = False

    def run(self, jobs, corpus, on_step, on_record) -> None:
        if not Detaching.handed:
            Detaching.handed = True
            from modern_gpt.ablation.executors import Detached

            raise Detached(f"{len(jobs)} runs are handed over")
        super().run(jobs, corpus, on_step, on_record)
