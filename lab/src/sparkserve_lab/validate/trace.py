"""Kernel names from a torch profiler trace (Chrome trace JSON, optionally gzipped).

`torch.profiler` exports events with `"cat": "kernel"` for GPU kernels; their `name` is the demangled
kernel symbol (e.g. `void marlin_moe_wna16::Marlin<...>`), which is what the expectations match.
"""

from __future__ import annotations

from pathlib import Path

from sparkserve_lab.trace.trace import load_events


def kernel_names(path: Path) -> list[str]:
    """Distinct kernel names, in first-seen order."""
    seen: dict[str, None] = {}
    for ev in load_events(path):
        if ev.get("cat") in ("kernel", "Kernel") and isinstance(ev.get("name"), str):
            seen.setdefault(ev["name"], None)
    return list(seen)
