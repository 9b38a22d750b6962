"""Ray as a user starts it: `ray start --head` in a subprocess, with token authentication (Ray 2.59+ turns it on for
a cluster that `ray start` makes where ~/.ray/auth_token exists), and the driver a separate `modern-gpt` process.

The cluster has a HOME of its own (so ~/.ray is the test's, never the user's), listens on 127.0.0.1 only, and
pretends to have one GPU (Ray advertises what it is told): a task can reserve it, and torch there has no CUDA. It is
stopped by its session at the end of the module, without `ray stop` (which would stop every Ray of the machine),
and the test checks that none of its processes is left.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.clihelp import concurrently
from tests.executors.test_executors import TINY, values

pytestmark = pytest.mark.slow
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_session(sid: int) -> list[str]:
    """The processes of a session: what is left of the cluster."""
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    left.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
            except (OSError, ValueError):
                pass  # ended meanwhile
    return left


def stop_session(proc: subprocess.Popen, group: bool = False, patience: float = 30) -> list[str]:
    """SIGTERM to a process that leads its own session (or to its whole process group), SIGKILL after `patience`
    seconds, then SIGKILL to whatever of its session is left. Returns what was still there after the SIGTERM
    (empty: a clean stop)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM) if group else proc.terminate()
        try:
            proc.wait(patience)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
            proc.wait(10)
    deadline = time.time() + patience
    while in_session(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    left = in_session(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    return left


def stop(head: subprocess.Popen) -> list[str]:
    """`ray start --block` stops its processes on SIGTERM; anything left of its session is killed."""
    return stop_session(head)


@pytest.fixture(scope="module")
def ray_start(tmp_path_factory):
    pytest.importorskip("ray")
    home = tmp_path_factory.mktemp("home")
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARIABLES}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", PYTHONUNBUFFERED="1")
    ray = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=120)
    assert (home / ".ray" / "auth_token").is_file()
    port, log = free_port(), Path(temp) / "head.log"
    head = subprocess.Popen(
        [ray, "start", "--head", "--block", "--port", str(port), "--node-ip-address", "127.0.0.1"]
        + ["--num-cpus", "1", "--num-gpus", "1", "--object-store-memory", str(100 << 20)]
        + ["--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own session: stopped as one, and Ctrl-C in the test's terminal stays ours
    )
    try:
        deadline = time.time() + 120
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.2)
        assert "Token authentication is enabled" in log.read_text()
        yield SimpleNamespace(address=f"127.0.0.1:{port}", env=env, home=home)
    finally:
        left = stop(head)
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, left  # stopped by its SIGTERM, not by the SIGKILL that cleaned up after it
    assert not in_session(head.pid)


@pytest.fixture(scope="module")
def reference(executor_reference):
    return executor_reference[0]  # test_executors' --jobs 1 values of TINY, trained once a session (conftest.py)


def driver_process(ray_start, *args, **env) -> subprocess.Popen:
    """modern-gpt as a separate process, as on a login node: Ray is imported there for the first time."""
    return subprocess.Popen(
        [sys.executable, "-m", "modern_gpt", *map(str, args)],
        env={**ray_start.env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def driver(ray_start, *args, **env) -> subprocess.CompletedProcess:
    # a retry loop fails the test instead of hanging it
    return concurrently(lambda _: driver_process(ray_start, *args, **env), [None], timeout=300)[0]


def test_the_token_where_ray_keeps_it_is_sent_and_the_ablation_equals_jobs_1(ray_start, reference, tmp_path):
    """RAY_AUTH_MODE is not set: Ray alone would connect without the token, and be refused for ever."""
    assert "RAY_AUTH_MODE" not in ray_start.env
    folder = tmp_path / "r"
    out = driver(ray_start, "ablate", *TINY, "--executor", "ray", "--ray-address", ray_start.address, "--out", folder)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "InvalidAuthToken" not in out.stderr
    assert values(folder).equals(reference)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["executor"]["address"] == ray_start.address and meta["device_name"] == "the Ray workers' CPUs"
    assert {n["address"] for n in meta["executor"]["nodes"]} == {"127.0.0.1"}


def test_a_missing_or_wrong_token_is_one_sentence_that_says_how_to_give_it(ray_start, tmp_path):
    empty = tmp_path / "home"
    empty.mkdir()
    (tmp_path / "wrong").write_text("0" * 64)
    cases = [
        ({"HOME": str(empty)}, "the Ray cluster at {} (--ray-address) asks for a token"),
        ({"RAY_AUTH_TOKEN": "0" * 64}, "the Ray cluster at {} (--ray-address) refused the token from RAY_AUTH_TOKEN,"),
        ({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "wrong")}, "the Ray cluster at {} (--ray-address) refused the token"),
        ({"RAY_AUTH_MODE": "token", "HOME": str(empty)}, "RAY_AUTH_MODE is token, but this machine has no Ray token"),
        (
            {"RAY_AUTH_MODE": "disabled"},
            "the Ray cluster at {} (--ray-address) asks for a token (token authentication), "
            "and RAY_AUTH_MODE=disabled here sends none; unset RAY_AUTH_MODE, or set it to token.",
        ),
        ({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")}, f"RAY_AUTH_TOKEN_PATH names {tmp_path / 'none'}, but"),
    ]
    folder = tmp_path / "r"
    args = ["ablate", *TINY, "--executor", "ray", "--ray-address", ray_start.address, "--out", folder]
    # two drivers at a time (start-up, torch and Ray, is most of their time): each is refused before any folder
    outs = concurrently(lambda case: driver_process(ray_start, *args, **case[0]), cases, timeout=300)
    for (env, start), out in zip(cases, outs, strict=True):
        assert out.returncode == 2, (env, out.stderr)
        assert out.stderr.startswith("modern-gpt: error: " + start.format(ray_start.address)), (env, out.stderr)
        assert out.stderr.count("\n") == 1, out.stderr  # one sentence: no log lines of Ray's retries before it
        assert "`ray get-auth-token` on the head node" in out.stderr and "RAY_AUTH_TOKEN_PATH" in out.stderr
        assert not folder.exists()


def test_gpus_per_run_from_a_driver_without_cuda_reaches_the_workers(ray_start, tmp_path):
    """The driver (torch without CUDA here) plans and connects without touching CUDA; the device is resolved on
    the worker, whose torch has no CUDA either: one sentence, where a GPU run would otherwise train on the CPU."""
    if torch.cuda.is_available():
        pytest.skip("this machine's torch has CUDA")
    args = ["ablate", *TINY, "--executor", "ray", "--ray-address", ray_start.address, "--gpus-per-run", "1"]
    out = driver(ray_start, *args, "--out", tmp_path / "r")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "AssertionError" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("modern-gpt: error: a run on the Ray node ") and last.endswith(
        "reserved 1 GPU, but torch "
        f"{torch.__version__} there sees no CUDA GPU; install a CUDA build of torch on the GPU nodes, or leave out "
        "--gpus-per-run."
    ), last
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["device"] == "cuda" and meta["device_name"] == "the Ray workers' GPUs"
    assert meta["executor"]["gpus_per_run"] == 1
