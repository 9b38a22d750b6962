"""run/checkpoint.py on a checkpoint whose config.json was edited by hand: one sentence, never a traceback."""

import json

import pytest

from modern_gpt.core.errors import UserError
from modern_gpt.run.checkpoint import load_checkpoint


@pytest.mark.parametrize("key", ["tie_embeddings", "no_bias"])
def test_a_config_json_that_no_longer_matches_the_weights_is_one_sentence(made, tmp_path, key):
    """A flag flipped (or deleted, to its default) names the weights it misses and those it does not expect: a
    hypothesis case found it, where safetensors gives sets, which cannot be sliced."""
    folder = made("ckpt", tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    model = config["model"]
    model[key] = not model[key]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"model\.safetensors does not match config\.json \(missing \[") as e:
        load_checkpoint(folder)
    assert str(e.value).count("\n") == 0 and str(e.value).endswith(").")
