"""The README's commands work on a fresh clone (issue 44, item 8): --data tinyshakespeare is the whole text the
package ships, and the smoke corpus is its first 300 KB, byte for byte as before."""

import hashlib

from modern_gpt.core.config import DataConfig
from modern_gpt.core.settings import resolve
from modern_gpt.data.corpus import read_raw

SMOKE_SHA256 = "7bce277f2f9d6c2c5ebb6307101f7b5a6fe4ada24dd87971bd874d4bed8d503b"  # smoke.txt's before the move
FULL_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"  # the whole text, 1,115,394 bytes


def test_the_smoke_corpus_is_unchanged():
    name, [(_, raw)] = read_raw(DataConfig())
    assert name == "smoke" and hashlib.sha256(raw).hexdigest() == SMOKE_SHA256


def test_data_tinyshakespeare_is_the_whole_text_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = resolve("shakespeare", False, {"data.path": "tinyshakespeare"})  # the README's second command
    assert settings.data.path == "tinyshakespeare"  # a name, not made a path of this folder
    name, [(_, raw)] = read_raw(settings.data)
    assert name == "tinyshakespeare" and len(raw) == 1_115_394
    assert hashlib.sha256(raw).hexdigest() == FULL_SHA256


def test_a_file_of_that_name_in_the_folder_is_the_user_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tinyshakespeare").write_text("my own text\n")
    settings = resolve(None, False, {"data.path": "tinyshakespeare"})
    assert settings.data.path == str(tmp_path / "tinyshakespeare")
    assert read_raw(settings.data)[1][0][1] == b"my own text\n"
