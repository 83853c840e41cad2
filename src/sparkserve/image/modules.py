"""Read and validate the JIT module list (docker/jit-modules.toml). Pure Python: no torch, no flashinfer."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparkserve import config
from sparkserve.errors import SparkserveError

DEFAULT_LIST = Path("docker") / "jit-modules.toml"
SETS = ("full", "ci")
Dtype = Literal["bfloat16", "float16", "float8_e4m3fn"]
DTYPES: tuple[str, ...] = typing.get_args(Dtype)


# The params of each kind (every param required, no others allowed), read by sparkserve.config.
@dataclass(frozen=True)
class PrefillSink:
    backend: str
    q_dtype: Dtype
    kv_dtype: Dtype
    head_dim: int
    sliding_window: bool


@dataclass(frozen=True)
class Xqa:
    input_dtype: Dtype
    kv_dtype: Dtype
    page_size: int
    head_dim: int
    head_group_ratio: int
    sliding_window: bool
    output_dtype: Dtype
    q_seq_len: int


@dataclass(frozen=True)
class DecodeSink:
    """CUDA-core batch decode with attention sinks (flashinfer patch 0001): what
    BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=False).plan(use_sinks=True) builds."""

    q_dtype: Dtype
    kv_dtype: Dtype
    output_dtype: Dtype
    head_dim: int
    sliding_window: bool


@dataclass(frozen=True)
class NoParams:
    pass


KINDS: dict[str, type] = {
    "prefill_sink": PrefillSink,
    "xqa": Xqa,
    "decode_sink": DecodeSink,
    "sampling": NoParams,
    "cutlass_fused_moe_sm120": NoParams,
}


@dataclass(frozen=True)
class Module:
    name: str
    kind: str
    ci: bool
    params: dict[str, str | int | bool] = field(default_factory=dict)
    ci_skip_reason: str = ""


# The file's schema: the params table is read by its kind's dataclass once the kind is known.
@dataclass(frozen=True)
class _Entry:
    name: str
    kind: str
    ci: bool
    params: dict[str, object] = field(default_factory=dict)
    ci_skip_reason: str = ""


@dataclass(frozen=True)
class _ModuleList:
    schema: Literal[1]
    module: tuple[_Entry, ...] = ()


def parse(text: str, source: str = "jit module list") -> list[Module]:
    data = config.parse_toml(_ModuleList, text, source)
    if not data.module:
        raise SparkserveError(f"{source}: no [[module]] entries")
    modules: list[Module] = []
    seen: set[str] = set()
    for i, entry in enumerate(data.module):
        if not entry.name:
            raise SparkserveError(f"{source}: module #{i + 1}: needs a name")
        where = f"{source}: module {entry.name!r}"
        if entry.name in seen:
            raise SparkserveError(f"{where}: duplicate name")
        seen.add(entry.name)
        if entry.kind not in KINDS:
            raise SparkserveError(f"{where}: unknown kind {entry.kind!r} (known: {', '.join(KINDS)})")
        if not entry.ci and not entry.ci_skip_reason.strip():
            raise SparkserveError(f"{where}: ci = false needs a ci_skip_reason (what CI leaves out, and why)")
        params: Any = config.parse(KINDS[entry.kind], entry.params, source, f"module[{i + 1}].params")
        modules.append(Module(name=entry.name, kind=entry.kind, ci=entry.ci,
                              params=dataclasses.asdict(params), ci_skip_reason=entry.ci_skip_reason))
    return modules


def load(path: Path) -> list[Module]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SparkserveError(f"cannot read the JIT module list {path}: {exc}") from exc
    return parse(text, str(path))


def select(modules: list[Module], which: str,
           names: list[str] | None = None) -> tuple[list[Module], list[Module]]:
    """(modules to build, modules left out) for a set name: full = all, ci = those marked ci; names, if
    given, pick modules of the list by name instead (e.g. the one a kernel edit touches)."""
    if names:
        unknown = sorted(set(names) - {m.name for m in modules})
        if unknown:
            raise SparkserveError(f"no module named {', '.join(unknown)} in the list "
                                  f"(known: {', '.join(m.name for m in modules)})")
        return [m for m in modules if m.name in names], []
    if which not in SETS:
        raise SparkserveError(f"unknown module set {which!r} (known: {', '.join(SETS)})")
    if which == "full":
        return list(modules), []
    return [m for m in modules if m.ci], [m for m in modules if not m.ci]
