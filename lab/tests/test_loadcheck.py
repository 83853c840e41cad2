"""The weight-loader comparison: identical parameters and tokens or a failure that names them."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkserve_lab import loadcheck
from sparkserve_lab.loadcheck import Load, compare

from sparkserve.errors import SparkserveError

DIGESTS = {"a.weight": "11", "b.weight": "22"}
TOKENS = [[1, 2, 3], [4, 5]]


def load(fmt: str, rnd: int = 1, digests: dict[str, str] | None = None, tokens: list[list[int]] | None = None,
         weights_s: float | None = 10.0) -> Load:
    return Load(fmt, rnd, weights_s, 30.0, True, dict(digests or DIGESTS), tokens or TOKENS)


def test_identical_loads_pass_with_medians_per_format() -> None:
    v = compare([load("safetensors", 1, weights_s=12.0), load("fastsafetensors", 1, weights_s=4.0),
                 load("safetensors", 2, weights_s=10.0), load("fastsafetensors", 2, weights_s=6.0)])
    assert v.ok, v.problems
    assert v.summary["safetensors"]["weights_s_median"] == 11.0
    assert v.summary["fastsafetensors"]["weights_s_median"] == 5.0
    assert v.summary["parameters"] == 2 and v.summary["page_cache_dropped"] is True


def test_a_differing_parameter_is_named() -> None:
    v = compare([load("safetensors"), load("fastsafetensors", digests={"a.weight": "11", "b.weight": "XX"})])
    assert not v.ok and "b.weight" in v.problems[0]


def test_missing_parameter_and_other_tokens_fail() -> None:
    v = compare([load("safetensors"), load("fastsafetensors", digests={"a.weight": "11"}, tokens=[[9]])])
    assert not v.ok
    assert any("other parameters" in p and "b.weight" in p for p in v.problems)
    assert any("other tokens" in p for p in v.problems)


def test_one_format_compares_nothing() -> None:
    assert not compare([load("safetensors"), load("safetensors", 2)]).ok


def test_a_format_without_load_time_fails() -> None:
    v = compare([load("safetensors"), load("fastsafetensors", weights_s=None)])
    assert not v.ok and any("Loading weights took" in p for p in v.problems)


def test_digest_of_digests_depends_on_every_entry() -> None:
    assert load("x").digest() != load("x", digests={"a.weight": "11", "b.weight": "23"}).digest()


def test_load_line_is_vllms() -> None:
    line = "(EngineCore pid=1) INFO 11-24 [default_loader.py:507] Loading weights took 12.34 seconds"
    assert loadcheck.load_seconds(f"x\n{line}\ny\n") == 12.34
    assert loadcheck.load_seconds("no such line") is None


def test_refuses_a_folder_without_weights_and_one_format(tmp_path: Path) -> None:
    with pytest.raises(SparkserveError, match="random-weights-seed"):
        loadcheck.check_args(tmp_path, ["safetensors", "fastsafetensors"], 1)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model-00000-of-00000.safetensors").write_bytes(b"")
    with pytest.raises(SparkserveError, match="two or more"):
        loadcheck.check_args(tmp_path, ["safetensors", "safetensors"], 1)
    loadcheck.check_args(tmp_path, ["safetensors", "fastsafetensors"], 1)
