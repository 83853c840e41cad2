"""The JIT module list parses, names every module the issue asks for, and rejects malformed entries."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.image import modules, specs

LIST = Path(__file__).resolve().parents[2] / "docker" / "jit-modules.toml"


def test_repo_list() -> None:
    mods = modules.load(LIST)
    kinds = {m.kind for m in mods}
    assert kinds == {"prefill_sink", "xqa", "decode_sink", "sampling", "cutlass_fused_moe_sm120"}
    xqa = {(m.params["kv_dtype"], m.params["sliding_window"]) for m in mods if m.kind == "xqa"}
    assert xqa == {(kv, swa) for kv in ("bfloat16", "float8_e4m3fn") for swa in (True, False)}
    # the CUDA-core decode-with-sinks build (flashinfer patch 0001): the profiles' fp8 KV, both window kinds
    dec = {(m.params["kv_dtype"], m.params["sliding_window"]) for m in mods if m.kind == "decode_sink"}
    assert {("float8_e4m3fn", True), ("float8_e4m3fn", False)} <= dec
    assert all(m.ci and m.params["q_dtype"] == m.params["output_dtype"] == "bfloat16"
               for m in mods if m.kind == "decode_sink")
    assert all(m.params["head_dim"] == 64 for m in mods if "head_dim" in m.params)
    ci, left = modules.select(mods, "ci")
    assert [m.name for m in left] == ["cutlass-fused-moe-sm120"] and left[0].ci_skip_reason
    assert len(ci) + len(left) == len(mods) == len(modules.select(mods, "full")[0])
    # by name: the module a kernel edit touches, whatever its set
    one, none = modules.select(mods, "ci", ["cutlass-fused-moe-sm120"])
    assert [m.name for m in one] == ["cutlass-fused-moe-sm120"] and none == []
    with pytest.raises(SparkserveError, match="no module named nope in the list"):
        modules.select(mods, "ci", ["nope"])


@pytest.mark.parametrize(("body", "fragment"), [
    ('kind = "xqa"\nci = true', "module[1].name: expected a string, got nothing"),
    ('name = ""\nkind = "xqa"\nci = true', "module #1: needs a name"),
    ('name = "a"\nkind = "nope"\nci = true', "unknown kind"),
    ('name = "a"\nkind = "sampling"\nci = false', "ci_skip_reason"),
    ('name = "a"\nkind = "sampling"\nci = "yes"', "module[1].ci: expected true or false, got 'yes'"),
    ('name = "a"\nkind = "sampling"\nci = true\nparams = { x = 1 }',
     "module[1].params.x: unknown key (known: none)"),
    ('name = "a"\nkind = "prefill_sink"\nci = true\nparams = { backend = "fa2", q_dtype = "bfloat16", '
     'kv_dtype = "float8_e4m3fn", head_dim = 64 }',
     "module[1].params.sliding_window: expected true or false, got nothing"),
    ('name = "a"\nkind = "prefill_sink"\nci = true\nparams = { backend = "fa2", q_dtype = "bf16", '
     'kv_dtype = "float8_e4m3fn", head_dim = 64, sliding_window = true }',
     "module[1].params.q_dtype: expected one of 'bfloat16', 'float16', 'float8_e4m3fn', got 'bf16'"),
    ('name = "a"\nkind = "prefill_sink"\nci = true\nparams = { backend = "fa2", q_dtype = "bfloat16", '
     'kv_dtype = "float8_e4m3fn", head_dim = true, sliding_window = true }',
     "module[1].params.head_dim: expected a whole number, got True"),
])
def test_bad_entries(body: str, fragment: str) -> None:
    with pytest.raises(SparkserveError, match=None) as info:
        modules.parse(f"schema = 1\n[[module]]\n{body}\n")
    assert fragment in str(info.value)


def test_duplicates_and_sets() -> None:
    text = "schema = 1\n" + '[[module]]\nname = "a"\nkind = "sampling"\nci = true\n' * 2
    with pytest.raises(SparkserveError, match="duplicate"):
        modules.parse(text)
    with pytest.raises(SparkserveError, match="unknown module set"):
        modules.select([], "some")


DECODE_SINK = ('name = "d"\nkind = "decode_sink"\nci = true\nparams = { q_dtype = "bfloat16", '
               'kv_dtype = "float8_e4m3fn", output_dtype = "bfloat16", head_dim = 64, sliding_window = %s }')


@pytest.mark.parametrize("swa", [True, False])
def test_decode_sink_spec(monkeypatch: pytest.MonkeyPatch, swa: bool) -> None:
    """decode_sink asks FlashInfer for exactly what BatchDecodeWithPagedKVCacheWrapper.plan() builds with
    use_tensor_cores=False and use_sinks=True: get_batch_decode_module's 10 positional args, the last one
    (use_attention_sink) True, int32 indptr, no position encoding, no soft cap."""
    (mod,) = modules.parse(f"schema = 1\n[[module]]\n{DECODE_SINK % str(swa).lower()}\n")
    assert mod.params == {"q_dtype": "bfloat16", "kv_dtype": "float8_e4m3fn", "output_dtype": "bfloat16",
                          "head_dim": 64, "sliding_window": swa}
    calls: list[tuple[Any, ...]] = []

    def gen_batch_decode_module(*args: Any) -> str:
        calls.append(args)
        return "spec"

    fakes = {
        "torch": SimpleNamespace(bfloat16="bf16", float8_e4m3fn="e4m3", int32="i32"),
        "flashinfer.jit.attention.modules": SimpleNamespace(gen_batch_decode_module=gen_batch_decode_module),
    }
    monkeypatch.setattr(specs, "_mod", lambda name: fakes[name])
    assert specs.jit_spec(mod) == "spec"
    assert calls == [("bf16", "e4m3", "bf16", "i32", 64, 64, 0, swa, False, True)]


def test_decode_sink_rejects_bad_params() -> None:
    body = DECODE_SINK.replace('output_dtype = "bfloat16"', 'output_dtype = "fp32"') % "true"
    with pytest.raises(SparkserveError, match=r"params\.output_dtype: expected one of .* got 'fp32'"):
        modules.parse(f"schema = 1\n[[module]]\n{body}\n")
    body = DECODE_SINK.replace(", head_dim = 64", "") % "true"
    with pytest.raises(SparkserveError, match=r"params\.head_dim: expected a whole number, got nothing"):
        modules.parse(f"schema = 1\n[[module]]\n{body}\n")
