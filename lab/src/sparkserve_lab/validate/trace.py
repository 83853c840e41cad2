"""Kernel names from a torch profiler trace (Chrome trace JSON, optionally gzipped).

`torch.profiler` exports events with `"cat": "kernel"` for GPU kernels; their `name` is the demangled
kernel symbol (e.g. `void marlin_moe_wna16::Marlin<...>`), which is what the expectations match.
"""

from __future__ import annotations

import json
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve_lab import gzfile


def kernel_names(path: Path) -> list[str]:
    """Distinct kernel names, in first-seen order."""
    try:
        raw = gzfile.read_bytes(path)
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"unreadable profiler trace {path}: {exc}") from exc
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    seen: dict[str, None] = {}
    for ev in events:
        if isinstance(ev, dict) and ev.get("cat") in ("kernel", "Kernel") and isinstance(ev.get("name"), str):
            seen.setdefault(ev["name"], None)
    return list(seen)
