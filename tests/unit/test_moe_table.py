"""The MoE tactic table: its format, its lookup, and the checks that refuse a table from another FlashInfer
build, another arch, another kernel path or another model shape, each naming the mismatch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sparkserve.serving.moe import table as tables
from sparkserve.serving.moe import tactics
from sparkserve.serving.moe.shape import GPT_OSS_20B, GPT_OSS_120B, MoeShape, for_model

PATCHES = (("0001-honour-attention-sinks-in-fa2-batch-decode", "a" * 64),)


def make_table(**kw: object) -> tables.Table:
    build = tables.Build("0.7.2.post1", PATCHES, tactics.SM120_MXFP8_MXFP4, (6, 12), "12.1")
    entries = (tables.Entry(1, 4, 13, "128x32x128 swap_ab", "128x32x128 swap_ab", 40.0, 80.0),
               tables.Entry(16, 5, 14, "128x64x128 swap_ab", "128x64x128 swap_ab", 60.0, 90.0),
               tables.Entry(256, 0, 9, "128x128x128 no_swap", "128x128x128 no_swap finalize", 300.0, 300.0))
    t = tables.Table(build, GPT_OSS_120B, entries, "NVIDIA GB10")
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def env(**kw: object) -> tables.Environment:
    e = tables.Environment("0.7.2.post1", PATCHES, "12.1", tactics.SM120_MXFP8_MXFP4, GPT_OSS_120B)
    return replace(e, **kw)  # type: ignore[arg-type]


def test_round_trip(tmp_path: Path) -> None:
    t = make_table()
    path = tables.write(t, tmp_path / "moe-tactics.json")
    back = tables.load(path)
    assert back.to_dict() == t.to_dict()
    assert tables.check(back, env()) == []
    assert back.describe()[0].startswith("    1 tokens: gemm1 #4 128x32x128 swap_ab")
    assert "2.00x vs default" in back.describe()[0]


@pytest.mark.parametrize(("tokens", "bucket"), [(1, 1), (2, 16), (16, 16), (17, 256), (9000, 256)])
def test_lookup_takes_the_first_bucket_at_or_above(tokens: int, bucket: int) -> None:
    assert make_table().lookup(tokens).tokens == bucket


@pytest.mark.parametrize(("changed", "fragment"), [
    ({"flashinfer_version": "0.7.1"}, "made with flashinfer 0.7.2.post1, this image has 0.7.1"),
    ({"flashinfer_patches": (*PATCHES, ("0002-add-n-8-and-n-16-swapab-tiles", "b" * 64))},
     "FlashInfer patches [0001-honour-attention-sinks-in-fa2-batch-decode (code aaaaaaaaaaaa)], this image"),
    ({"compute_capability": "12.0"}, "made on compute capability 12.1 (NVIDIA GB10), this GPU is 12.0"),
    ({"path": tactics.SM90_BF16_MXFP4},
     "the table is for sm120-mxfp8-mxfp4, this profile runs sm90-bf16-mxfp4"),
    ({"shape": GPT_OSS_20B}, "experts 128 (table) vs 32"),
])
def test_mismatches_are_named(changed: dict[str, object], fragment: str) -> None:
    problems = tables.check(make_table(), env(**changed))
    assert len(problems) == 1 and fragment in problems[0], problems


def test_no_gpu_skips_the_arch_check() -> None:
    assert tables.check(make_table(), env(compute_capability=None)) == []


def test_unknown_tactic_list_and_dry_run_tables_are_refused() -> None:
    t = make_table()
    t.build = replace(t.build, tactic_counts=(7, 14))
    assert any("7+14 tactics is no FlashInfer build" in p for p in tables.check(t, env()))
    dry = make_table(measurement={"synthetic": True})
    assert any("CPU dry run" in p for p in tables.check(dry, env()))
    assert tables.check(dry, env(), allow_synthetic=True) == []


def _raw(tmp_path: Path, mutate: object) -> Path:
    data = make_table().to_dict()
    mutate(data)  # type: ignore[operator]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))
    return p


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: d.update(kind="other"), "not a sparkserve MoE tactic table"),
    (lambda d: d["build"].update(path="sm100"), "unknown path 'sm100'"),
    (lambda d: d["build"].update(tactic_counts=[6]), "tactic_counts must be [gemm1, gemm2]"),
    (lambda d: d["buckets"][0].update(gemm1=6), "gemm1 6 is not a GEMM1 tactic (0..5)"),
    (lambda d: d["buckets"][0].update(gemm2=3), "gemm2 3 is not a GEMM2 tactic (6..17)"),
    (lambda d: d["buckets"].reverse(), "ascending token order"),
    (lambda d: d.update(buckets=[]), "no buckets"),
    (lambda d: d["shape"].update(hidden="2880"), "shape: hidden missing or not int"),
    (lambda d: d["buckets"][1].update(tokens=True), "tokens must be a number"),
])
def test_bad_tables_are_named(tmp_path: Path, mutate: object, fragment: str) -> None:
    with pytest.raises(tables.TableError, match=None) as info:
        tables.load(_raw(tmp_path, mutate))
    assert fragment in str(info.value)


def test_unreadable_table(tmp_path: Path) -> None:
    with pytest.raises(tables.TableError, match="cannot read"):
        tables.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(tables.TableError, match="not JSON"):
        tables.load(tmp_path / "bad.json")


def test_model_shapes(tmp_path: Path) -> None:
    assert GPT_OSS_120B.padded_hidden == 2944 and GPT_OSS_120B.padded_intermediate == 2944
    cfg = {"hidden_size": 2880, "intermediate_size": 2880, "num_local_experts": 32, "num_experts_per_tok": 4}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    local = for_model(str(tmp_path))
    assert local.key() == GPT_OSS_20B.key()
    assert isinstance(local, MoeShape)
    with pytest.raises(Exception, match="no known MoE shape"):
        for_model("meta-llama/Llama-3-8B")
