"""llama-benchy's tokenizer: a local folder, or a Hugging Face repo id looked up in the local cache only."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.bench.driver import local_tokenizer

from sparkserve.errors import SparkserveError


def _fake_hub(monkeypatch: pytest.MonkeyPatch, answer: Path | Exception) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def snapshot_download(repo_id: str, **kw: Any) -> str:
        seen.update(kw, repo_id=repo_id)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    monkeypatch.setitem(sys.modules, "huggingface_hub",
                        types.SimpleNamespace(snapshot_download=snapshot_download))
    return seen


def test_a_local_folder_is_taken_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    assert local_tokenizer(tmp_path) == tmp_path


def test_a_repo_id_comes_from_the_cache_never_the_network(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    seen = _fake_hub(monkeypatch, tmp_path)
    assert local_tokenizer(Path("openai/gpt-oss-120b")) == tmp_path
    assert seen["repo_id"] == "openai/gpt-oss-120b" and seen["local_files_only"] is True


def test_a_repo_id_not_in_the_cache_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_hub(monkeypatch, OSError("not cached"))
    with pytest.raises(SparkserveError, match=r"not in the local Hugging Face cache.*download the model"):
        local_tokenizer(Path("openai/gpt-oss-120b"))


def test_a_folder_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparkserveError, match=r"no tokenizer\.json"):
        local_tokenizer(tmp_path / "nowhere" / "deeper")
