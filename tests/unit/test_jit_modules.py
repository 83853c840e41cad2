"""The JIT module list parses, names every module the issue asks for, and rejects malformed entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.jit import modules

LIST = Path(__file__).resolve().parents[2] / "docker" / "jit-modules.toml"


def test_repo_list() -> None:
    mods = modules.load(LIST)
    kinds = {m.kind for m in mods}
    assert kinds == {"prefill_sink", "xqa", "sampling", "cutlass_fused_moe_sm120"}
    xqa = {(m.params["kv_dtype"], m.params["sliding_window"]) for m in mods if m.kind == "xqa"}
    assert xqa == {(kv, swa) for kv in ("bfloat16", "float8_e4m3fn") for swa in (True, False)}
    assert all(m.params["head_dim"] == 64 for m in mods if "head_dim" in m.params)
    ci, left = modules.select(mods, "ci")
    assert [m.name for m in left] == ["cutlass-fused-moe-sm120"] and left[0].ci_skip_reason
    assert len(ci) + len(left) == len(mods) == len(modules.select(mods, "full")[0])


@pytest.mark.parametrize(("body", "fragment"), [
    ('kind = "xqa"\nci = true', "needs a name"),
    ('name = "a"\nkind = "nope"\nci = true', "unknown kind"),
    ('name = "a"\nkind = "sampling"\nci = false', "ci_skip_reason"),
    ('name = "a"\nkind = "sampling"\nci = "yes"', "ci must be true or false"),
    ('name = "a"\nkind = "sampling"\nci = true\nparams = { x = 1 }', "unknown: ['x']"),
    ('name = "a"\nkind = "prefill_sink"\nci = true\nparams = { backend = "fa2", q_dtype = "bfloat16", '
     'kv_dtype = "float8_e4m3fn", head_dim = 64 }', "missing: ['sliding_window']"),
    ('name = "a"\nkind = "prefill_sink"\nci = true\nparams = { backend = "fa2", q_dtype = "bf16", '
     'kv_dtype = "float8_e4m3fn", head_dim = 64, sliding_window = true }', "q_dtype='bf16'"),
    ('name = "a"\nkind = "prefill_sink"\nci = true\nparams = { backend = "fa2", q_dtype = "bfloat16", '
     'kv_dtype = "float8_e4m3fn", head_dim = true, sliding_window = true }', "head_dim must be int"),
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
