"""The inputs the CI negative controls feed the levels are really wrong in the way they claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkserve_lab.testing import negative

from sparkserve.errors import SparkserveError


def test_diverge_reference_keeps_the_prefix_only(tmp_path: Path) -> None:
    src = tmp_path / "ref.json"
    src.write_text(json.dumps({"configuration": "c", "prompts": [{"token_ids": [5, 6, 7, 8, 9]}]}))
    assert negative.diverge_reference(src, tmp_path / "bad.json", after=3) == 1
    bad = json.loads((tmp_path / "bad.json").read_text())
    assert bad["prompts"][0]["token_ids"] == [5, 6, 7, 9, 10] and "tampered after 3" in bad["configuration"]
    src.write_text(json.dumps({"prompts": []}))
    with pytest.raises(SparkserveError, match="no prompts"):
        negative.diverge_reference(src, tmp_path / "x.json", after=3)


def test_scale_throughput(tmp_path: Path) -> None:
    f = tmp_path / "llama-benchy.json"
    f.write_text(json.dumps({"benchmarks": [{"tg_throughput": {"mean": 100.0, "values": [90.0, 110.0]},
                                             "pp_throughput": None}]}))
    assert negative.scale_throughput(f, 0.95) == 1
    tg = json.loads(f.read_text())["benchmarks"][0]["tg_throughput"]
    assert tg["mean"] == pytest.approx(95.0) and tg["values"] == pytest.approx([85.5, 104.5])
    f.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(SparkserveError):
        negative.scale_throughput(f, 0.95)
