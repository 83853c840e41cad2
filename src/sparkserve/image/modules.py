"""Read and validate the JIT module list (docker/jit-modules.toml). Pure Python: no torch, no flashinfer."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.errors import SparkserveError

DEFAULT_LIST = Path("docker") / "jit-modules.toml"
SETS = ("full", "ci")
DTYPES = ("bfloat16", "float16", "float8_e4m3fn")

# kind -> {param: type}; every param of a kind is required, no others are allowed.
KINDS: dict[str, dict[str, type]] = {
    "prefill_sink": {
        "backend": str, "q_dtype": str, "kv_dtype": str, "head_dim": int, "sliding_window": bool,
    },
    "xqa": {
        "input_dtype": str, "kv_dtype": str, "page_size": int, "head_dim": int,
        "head_group_ratio": int, "sliding_window": bool, "output_dtype": str, "q_seq_len": int,
    },
    # CUDA-core batch decode with attention sinks (flashinfer patch 0001): what
    # BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=False).plan(use_sinks=True) builds.
    "decode_sink": {
        "q_dtype": str, "kv_dtype": str, "output_dtype": str, "head_dim": int, "sliding_window": bool,
    },
    "sampling": {},
    "cutlass_fused_moe_sm120": {},
}
_DTYPE_PARAMS = ("q_dtype", "kv_dtype", "input_dtype", "output_dtype")


@dataclass(frozen=True)
class Module:
    name: str
    kind: str
    ci: bool
    params: dict[str, str | int | bool] = field(default_factory=dict)
    ci_skip_reason: str = ""


def _check_params(where: str, kind: str, params: object) -> dict[str, str | int | bool]:
    if not isinstance(params, dict):
        raise SparkserveError(f"{where}: params must be a table")
    schema = KINDS[kind]
    unknown = sorted(set(params) - set(schema))
    missing = sorted(set(schema) - set(params))
    if unknown or missing:
        raise SparkserveError(
            f"{where}: kind {kind!r} takes exactly {sorted(schema) or 'no params'}"
            + (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
        )
    out: dict[str, str | int | bool] = {}
    for key, typ in schema.items():
        value = params[key]
        # bool is an int subclass: demand the exact type
        if type(value) is not typ:
            raise SparkserveError(f"{where}: {key} must be {typ.__name__}, got {value!r}")
        if key in _DTYPE_PARAMS and value not in DTYPES:
            raise SparkserveError(f"{where}: {key}={value!r} is not one of {', '.join(DTYPES)}")
        assert isinstance(value, str | int)  # str, int or bool, checked above
        out[key] = value
    return out


def table_entries(text: str, source: str, key: str, allowed: set[str]) -> list[tuple[str, dict[str, object]]]:
    """The [[key]] tables of a `schema = 1` TOML file, each with its "source: key #n" for errors.

    Rejects a TOML error, another schema, no entries, an entry that is not a table, and unknown keys.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SparkserveError(f"{source}: {exc}") from exc
    if data.get("schema") != 1:
        raise SparkserveError(f"{source}: expected schema = 1")
    raw = data.get(key)
    if not isinstance(raw, list) or not raw:
        raise SparkserveError(f"{source}: no [[{key}]] entries")
    out = []
    for i, entry in enumerate(raw):
        where = f"{source}: {key} #{i + 1}"
        if not isinstance(entry, dict):
            raise SparkserveError(f"{where}: not a table")
        extra = sorted(set(entry) - allowed)
        if extra:
            raise SparkserveError(f"{where}: unknown keys {extra}")
        out.append((where, entry))
    return out


def parse(text: str, source: str = "jit module list") -> list[Module]:
    modules: list[Module] = []
    seen: set[str] = set()
    for where, entry in table_entries(text, source, "module",
                                      {"name", "kind", "ci", "params", "ci_skip_reason"}):
        name, kind, ci = entry.get("name"), entry.get("kind"), entry.get("ci")
        if not isinstance(name, str) or not name:
            raise SparkserveError(f"{where}: needs a name")
        where = f"{source}: module {name!r}"
        if name in seen:
            raise SparkserveError(f"{where}: duplicate name")
        seen.add(name)
        if kind not in KINDS:
            raise SparkserveError(f"{where}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        if not isinstance(ci, bool):
            raise SparkserveError(f"{where}: ci must be true or false")
        reason = entry.get("ci_skip_reason", "")
        if not isinstance(reason, str) or (not ci and not reason.strip()):
            raise SparkserveError(f"{where}: ci = false needs a ci_skip_reason (what CI leaves out, and why)")
        params = _check_params(where, kind, entry.get("params", {}))
        modules.append(Module(name=name, kind=kind, ci=ci, params=params, ci_skip_reason=reason))
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
