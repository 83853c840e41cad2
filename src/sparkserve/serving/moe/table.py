"""The MoE tactic table: which FlashInfer CUTLASS fused-MoE tactics to run per token bucket, chosen by
`sparkserve moe sweep`, checked by the entrypoint before vLLM starts (MOE_TACTICS=table).

A table is JSON (`moe-tactics.json`):

    {
      "schema": 1, "kind": "sparkserve-moe-tactics", "created": "2026-11-24T10:00:00Z",
      "build": {                                   # what the tactic indices mean: refused when it differs
        "flashinfer_version": "0.7.2.post1",
        "flashinfer_patches": [{"id": "0001-...", "code_sha256": "..."}, ...],   # the site's patch manifest
        "path": "sm120-mxfp8-mxfp4",              # sparkserve.serving.moe.tactics.PATHS
        "tactic_counts": [6, 12],                  # GEMM1 and GEMM2 tactics of that runner
        "compute_capability": "12.1"
      },
      "gpu": "NVIDIA GB10",
      "shape": {"model": ..., "hidden": 2880, "intermediate": 2880, "experts": 128, "top_k": 4,
                "swiglu_alpha": 1.702, "swiglu_beta": 1.0, "swiglu_limit": 7.0, ...},
      "buckets": [                                 # ascending; tokens -> the first bucket >= tokens
        {"tokens": 1, "gemm1": 4, "gemm2": 12, "gemm1_label": "128x32x128 swap_ab",
         "gemm2_label": "128x32x128 swap_ab", "time_us": 41.2, "default_time_us": 77.9}, ...
      ],
      "measurement": {...}, "source": {...}         # how it was measured, which run-store record
    }

A call with more tokens than the last bucket uses the last bucket (FlashInfer's own mapping clamps the
same way). vLLM reads the same file (patch vllm 0004, VLLM_FLASHINFER_MOE_TACTICS): only `buckets` and
`build.tactic_counts`; every other check is the entrypoint's, before vLLM starts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.serving.moe import tactics as tmod
from sparkserve.serving.moe.shape import MoeShape

SCHEMA = 1
KIND = "sparkserve-moe-tactics"
FILE_NAME = "moe-tactics.json"


@dataclass(frozen=True)
class Build:
    flashinfer_version: str
    flashinfer_patches: tuple[tuple[str, str], ...]  # (patch id, code sha256)
    path: str
    tactic_counts: tuple[int, int]
    compute_capability: str

    def to_dict(self) -> dict[str, Any]:
        return {"flashinfer_version": self.flashinfer_version,
                "flashinfer_patches": [{"id": i, "code_sha256": h} for i, h in self.flashinfer_patches],
                "path": self.path, "tactic_counts": list(self.tactic_counts),
                "compute_capability": self.compute_capability}


@dataclass(frozen=True)
class Entry:
    tokens: int
    gemm1: int
    gemm2: int
    gemm1_label: str = ""
    gemm2_label: str = ""
    time_us: float | None = None
    default_time_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "gemm1": self.gemm1, "gemm2": self.gemm2,
                "gemm1_label": self.gemm1_label, "gemm2_label": self.gemm2_label,
                "time_us": self.time_us, "default_time_us": self.default_time_us}


@dataclass
class Table:
    build: Build
    shape: MoeShape
    entries: tuple[Entry, ...]
    gpu: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    measurement: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)

    def lookup(self, tokens: int) -> Entry:
        for e in self.entries:
            if e.tokens >= tokens:
                return e
        return self.entries[-1]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "kind": KIND, "created": self.created, "build": self.build.to_dict(),
                "gpu": self.gpu, "shape": self.shape.to_dict(),
                "buckets": [e.to_dict() for e in self.entries],
                "measurement": self.measurement, "source": self.source}

    def describe(self) -> list[str]:
        """One line per bucket, for the start banner and the sweep's output."""
        out = []
        for e in self.entries:
            gain = (f", {e.default_time_us / e.time_us:.2f}x vs default"
                    if e.time_us and e.default_time_us else "")
            t = f" {e.time_us:.1f} us" if e.time_us is not None else ""
            out.append(f"{e.tokens:>5} tokens: gemm1 #{e.gemm1} {e.gemm1_label or '?'}, "
                       f"gemm2 #{e.gemm2} {e.gemm2_label or '?'}{t}{gain}")
        return out


class TableError(SparkserveError):
    """A tactic table that cannot be read, or that does not fit this image, GPU or model."""


def _need(d: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    v = d.get(key)
    if isinstance(v, bool) and typ in (int, float, (int, float)):
        raise TableError(f"{where}: {key} must be a number, got {v!r}")
    if not isinstance(v, typ):
        raise TableError(f"{where}: {key} missing or not {getattr(typ, '__name__', typ)} (got {v!r})")
    return v


def parse(data: Any, source: str = "tactic table") -> Table:
    if not isinstance(data, dict):
        raise TableError(f"{source}: not a JSON object")
    if data.get("kind") != KIND or data.get("schema") != SCHEMA:
        raise TableError(f"{source}: not a sparkserve MoE tactic table (kind {data.get('kind')!r}, "
                         f"schema {data.get('schema')!r}; expected {KIND!r}, {SCHEMA})")
    b = _need(data, "build", dict, source)
    where = f"{source}: build"
    patches = _need(b, "flashinfer_patches", list, where)
    if not all(isinstance(p, dict) and isinstance(p.get("id"), str) for p in patches):
        raise TableError(f"{where}: flashinfer_patches must be a list of {{id, code_sha256}}")
    counts = _need(b, "tactic_counts", list, where)
    if len(counts) != 2 or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in counts):
        raise TableError(f"{where}: tactic_counts must be [gemm1, gemm2] positive integers, got {counts!r}")
    path = _need(b, "path", str, where)
    if path not in tmod.PATHS:
        raise TableError(f"{where}: unknown path {path!r} (known: {', '.join(tmod.PATHS)})")
    build = Build(_need(b, "flashinfer_version", str, where),
                  tuple((str(p["id"]), str(p.get("code_sha256", ""))) for p in patches),
                  path, (counts[0], counts[1]), _need(b, "compute_capability", str, where))
    s = _need(data, "shape", dict, source)
    where = f"{source}: shape"
    shape = MoeShape(str(s.get("model", "")), _need(s, "hidden", int, where),
                     _need(s, "intermediate", int, where), _need(s, "experts", int, where),
                     _need(s, "top_k", int, where),
                     float(_need(s, "swiglu_alpha", (int, float), where)),
                     float(_need(s, "swiglu_beta", (int, float), where)),
                     float(_need(s, "swiglu_limit", (int, float), where)))
    raw = _need(data, "buckets", list, source)
    if not raw:
        raise TableError(f"{source}: no buckets")
    entries = []
    n1, n2 = build.tactic_counts
    for i, e in enumerate(raw):
        where = f"{source}: bucket #{i + 1}"
        if not isinstance(e, dict):
            raise TableError(f"{where}: not an object")
        tokens, g1, g2 = (_need(e, k, int, where) for k in ("tokens", "gemm1", "gemm2"))
        if tokens < 1:
            raise TableError(f"{where}: tokens must be at least 1")
        if not 0 <= g1 < n1:
            raise TableError(f"{where}: gemm1 {g1} is not a GEMM1 tactic (0..{n1 - 1})")
        if not n1 <= g2 < n1 + n2:
            raise TableError(f"{where}: gemm2 {g2} is not a GEMM2 tactic ({n1}..{n1 + n2 - 1})")
        times = [e.get(k) for k in ("time_us", "default_time_us")]
        if any(t is not None and (isinstance(t, bool) or not isinstance(t, int | float)) for t in times):
            raise TableError(f"{where}: time_us / default_time_us must be numbers")
        entries.append(Entry(tokens, g1, g2, str(e.get("gemm1_label", "")), str(e.get("gemm2_label", "")),
                             None if times[0] is None else float(times[0]),
                             None if times[1] is None else float(times[1])))
    if [e.tokens for e in entries] != sorted({e.tokens for e in entries}):
        raise TableError(f"{source}: buckets must be in ascending token order, each once")
    return Table(build, shape, tuple(entries), str(data.get("gpu", "")), str(data.get("created", "")),
                 dict(data.get("measurement") or {}), dict(data.get("source") or {}))


def load(path: Path) -> Table:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise TableError(f"cannot read the tactic table {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise TableError(f"{path}: not JSON ({exc})") from None
    return parse(data, str(path))


def write(table: Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(table.to_dict(), indent=2) + "\n")
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class Environment:
    """What the running image, GPU and profile would execute."""

    flashinfer_version: str
    flashinfer_patches: tuple[tuple[str, str], ...]
    compute_capability: str | None  # None when no GPU could be asked
    path: str
    shape: MoeShape


def _patches(p: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{i} (code {h[:12] or '?'})" for i, h in p) or "none"


def check(table: Table, env: Environment, allow_synthetic: bool = False) -> list[str]:
    """Every way the table does not fit `env`, each naming what differs; empty when it fits. A table of a
    CPU dry run (synthetic timings) fits nothing unless `allow_synthetic` (the dry run's own install)."""
    b = table.build
    out = []
    if table.measurement.get("synthetic") and not allow_synthetic:
        out.append("measurement: the table comes from a CPU dry run (synthetic timings, no kernel ran)")
    if b.flashinfer_version != env.flashinfer_version:
        out.append(f"FlashInfer build: the table was made with flashinfer {b.flashinfer_version}, this image "
                   f"has {env.flashinfer_version}")
    if b.flashinfer_patches != env.flashinfer_patches:
        out.append(f"FlashInfer build: the table was made with the FlashInfer patches "
                   f"[{_patches(b.flashinfer_patches)}], this image has [{_patches(env.flashinfer_patches)}]")
    if env.compute_capability is not None and b.compute_capability != env.compute_capability:
        out.append(f"arch: the table was made on compute capability {b.compute_capability}"
                   f"{f' ({table.gpu})' if table.gpu else ''}, this GPU is {env.compute_capability}")
    if b.path != env.path:
        out.append(f"kernel path: the table is for {b.path}, this profile runs {env.path}")
    theirs, ours = table.shape.key(), env.shape.key()
    diffs = [f"{k} {theirs[k]} (table) vs {ours[k]}" for k in ours if theirs.get(k) != ours[k]]
    if diffs:
        out.append(f"model shape: the table was made for {table.shape.model or 'another model'}, "
                   f"this is {env.shape.model}: {', '.join(diffs)}")
    known = tmod.resolve(b.path, *b.tactic_counts)
    if known is None:
        out.append(f"tactic list: {b.tactic_counts[0]}+{b.tactic_counts[1]} tactics is no FlashInfer build "
                   f"sparkserve knows for {b.path}")
    return out

