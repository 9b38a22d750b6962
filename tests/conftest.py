import os
import tempfile

import pytest
import torch

# Tests never touch the user's token cache.
os.environ.setdefault("MODERN_GPT_CACHE", tempfile.mkdtemp(prefix="modern-gpt-test-cache-"))
torch.set_num_threads(1)


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")
