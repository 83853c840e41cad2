"""pins.toml read through its schema: what is more than a type (an empty pin, the index from the
environment) is still pins.py's own check; a key the schema does not know is refused where it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.supply import pins

ROOT = Path(__file__).resolve().parents[2]


def _root(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "pins.toml").read_text()
    assert old in text
    (tmp_path / "pins.toml").write_text(text.replace(old, new, 1))
    return tmp_path


def test_an_empty_pin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparkserveError, match=r"^pins.toml: \[base_image\] needs a non-empty string 'python"):
        pins.load(_root(tmp_path, 'python = "3.13"', 'python = ""'))


def test_a_misspelt_key_is_refused_at_its_path(tmp_path: Path) -> None:
    with pytest.raises(SparkserveError, match=r"pins.toml: upstream.vllm.sdist_sha: unknown key \(known: "):
        pins.load(_root(tmp_path, "sdist_sha256 = ", "sdist_sha = "))


def test_the_index_may_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, 'url = "https://pypi.org/simple"', "")
    monkeypatch.delenv("SPARKSERVE_INDEX_URL", raising=False)
    with pytest.raises(SparkserveError, match=r"^pins.toml: \[index\] needs a non-empty string 'url'$"):
        pins.load(root)
    monkeypatch.setenv("SPARKSERVE_INDEX_URL", "http://mirror/simple")
    assert pins.load(root).index_url == "http://mirror/simple"
