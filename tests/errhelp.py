"""What the error tests (tests/test_errors_*.py) share: the flags of a tiny run and ablation, the checks of a
one-sentence refusal, and makers of a results folder and a checkpoint."""

import json

from .clihelp import CLASSIC_ROPE, tiny

TINY = tiny(steps=3)

ABLATE = ["ablate", *TINY, "--jobs", "1", *CLASSIC_ROPE]


def assert_user_error(result, *fragments):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert err.startswith("modern-gpt: error: ") and err.count("\n") == 1, err  # one sentence, one line
    assert "Traceback" not in err + out
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def assert_ablation_error(result, *fragments):
    """An ablation that started and then failed: its progress lines on stderr, then the one sentence, exit 2."""
    code, out, err = result
    last = err.rstrip("\n").split("\n")[-1]
    assert_user_error((code, out, last + "\n"), *fragments)
    assert "Traceback" not in err


def make_results(run, folder):
    code, out, err = run(*ABLATE, "--out", folder)
    assert code == 0, err
    return json.loads((folder / "meta.json").read_text())


def make_checkpoint(run, folder):
    code, out, err = run("train", *TINY, "--out", folder)
    assert code == 0, err
    return folder
