"""Random gpt-oss weights as safetensors: the published names, shapes and dtypes, MXFP4 experts with
bounded scales, deterministic per seed. Needs torch and safetensors (the CPU venv of
scripts/ci/40-levels-cpu.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.testing import gptoss_dummy, gptoss_weights

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def small_cfg() -> dict[str, Any]:
    cfg = gptoss_dummy.gpt_oss_config("20b")
    cfg.update(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, num_local_experts=4, vocab_size=300)
    return cfg


def read_all(out: Path) -> dict[str, Any]:
    index = json.loads((out / "model.safetensors.index.json").read_text())
    tensors: dict[str, Any] = {}
    for f in sorted(set(index["weight_map"].values())):
        tensors.update(safetensors_torch.load_file(str(out / f)))
    assert set(tensors) == set(index["weight_map"])
    return tensors


def test_layout_of_a_small_checkpoint(tmp_path: Path) -> None:
    cfg = small_cfg()
    index = gptoss_weights.write(tmp_path, cfg, seed=1, shard_bytes=20_000)
    t = read_all(tmp_path)
    assert len(set(index["weight_map"].values())) > 1  # sharded
    assert index["metadata"]["total_size"] == sum(x.numel() * x.element_size() for x in t.values())
    assert t["model.embed_tokens.weight"].shape == (300, 64) and t["lm_head.weight"].dtype == torch.bfloat16
    assert t["model.layers.1.self_attn.q_proj.weight"].shape == (64, 64)
    assert t["model.layers.1.self_attn.k_proj.bias"].shape == (32,)
    assert t["model.layers.0.self_attn.o_proj.weight"].shape == (64, 64)
    assert t["model.layers.0.self_attn.sinks"].shape == (4,)
    assert t["model.layers.0.mlp.router.weight"].shape == (4, 64)
    # fc1: 2 * 96 rows over hidden 64 = 2 blocks of 32 FP4 values, 16 bytes each
    assert t["model.layers.0.mlp.experts.gate_up_proj_blocks"].shape == (4, 192, 2, 16)
    assert t["model.layers.0.mlp.experts.gate_up_proj_scales"].shape == (4, 192, 2)
    assert t["model.layers.0.mlp.experts.down_proj_blocks"].shape == (4, 64, 3, 16)
    assert t["model.layers.0.mlp.experts.down_proj_bias"].shape == (4, 64)
    scales = t["model.layers.1.mlp.experts.down_proj_scales"]
    assert scales.dtype == torch.uint8 and int(scales.min()) >= 120 and int(scales.max()) <= 123
    assert torch.all(t["model.norm.weight"] == 1)
    assert float(t["model.layers.0.self_attn.q_proj.weight"].float().abs().max()) < 0.2


def test_same_seed_same_bytes_other_seed_other(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, seed in ((a, 3), (b, 3), (c, 4)):
        d.mkdir()
        gptoss_weights.write(d, small_cfg(), seed=seed)
    ta, tb, tc = read_all(a), read_all(b), read_all(c)
    assert all(torch.equal(ta[k], tb[k]) for k in ta)
    assert not torch.equal(ta["lm_head.weight"], tc["lm_head.weight"])


def test_the_real_sizes_add_up() -> None:
    def total(size: str) -> int:
        specs = gptoss_weights.tensor_specs(gptoss_dummy.gpt_oss_config(size))
        return sum(gptoss_weights.nbytes(s, d) for _, s, d in specs)

    # the published checkpoints: about 13.8 GB (20b) and 65 GB (120b) of safetensors
    assert 13.5e9 < total("20b") < 14e9
    assert 64e9 < total("120b") < 66e9


def test_unquantized_config_refused() -> None:
    with pytest.raises(ValueError, match="MXFP4"):
        list(gptoss_weights.tensor_specs(gptoss_dummy.gpt_oss_config("tiny")))
