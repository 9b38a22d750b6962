import os
import tempfile

import pytest
import torch

# Tests never touch the user's token cache.
os.environ.setdefault("MODERN_GPT_CACHE", tempfile.mkdtemp(prefix="modern-gpt-test-cache-"))
# Every Ray node the tests start (and every process they start) uses 127.0.0.1, never the machine's network
# address. Ray reads this when it is imported, so it is set before any test imports it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
torch.set_num_threads(1)


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")
