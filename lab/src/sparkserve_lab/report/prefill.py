"""The report's section on prefill chunks under load: the latest `trace prefill` record per hardware and
configuration, a table per hardware of a full chunk's time per kernel class and per token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkserve_lab.report.decode import latest_profiles, number, rel
from sparkserve_lab.runstore import Run, Store, read_json
from sparkserve_lab.trace import record
from sparkserve_lab.trace.classify import CLASSES

# The rows under the classes: a label and its cell from one concurrency's summary.
ROWS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("chunk tokens (decode among them)",
     lambda s: f"{s['chunk_tokens']} ({number(s['chunk_decode_tokens'], 1)})"),
    ("full chunks / prefill steps", lambda s: f"{s['full_chunks']} / {s['prefill_steps']}"),
    ("kernels per chunk", lambda s: number(s["kernels_per_step"], 1)),
    ("step period, us (profiled)", lambda s: number(s["step_period_us"], 1)),
    ("tokens per s from the period (profiled)", lambda s: number(s["tokens_per_s_from_period"])),
)


def section(store: Store, out: Path) -> list[str]:
    L = ["## Prefill-chunk breakdown under load (`sparkserve-lab trace prefill`)", ""]
    found = latest_profiles(store, record.PREFILL_KIND, record.PREFILL_SUMMARY)
    if not found:
        return [*L, "None in the store.", ""]
    L += ["Each record profiles a running server while concurrent requests of token-id prompts (no prefix-"
          "cache block shared) are prefilled. A full chunk is a prefill step at the largest token count of "
          "the trace (the scheduler's budget, with the decode tokens of running requests in it). Per "
          "concurrency: a full chunk's GPU time per kernel class (mean over the full chunks) and the same "
          "per token; the profiled period is longer than an unprofiled step's.", ""]
    by_hw: dict[str, list[tuple[str, Run]]] = {}
    for (hw, cfg), r in sorted(found.items()):
        by_hw.setdefault(hw, []).append((cfg, r))
    for hw, items in by_hw.items():
        cols = [(cfg, c, s) for cfg, r in items
                for c, s in sorted(read_json(r.file(record.PREFILL_SUMMARY))["concurrency"].items(),
                                   key=lambda kv: int(kv[0]))]
        L += [f"### {hw}", ""]
        L += [f"- {cfg}: [`{r.run_id}`]({rel(r.path, out)})"
              + (", random weights" if r.metadata().get("random_weights") else "") for cfg, r in items]
        head = " | ".join(f"{cfg} c{c}" for cfg, c, _ in cols)
        L += ["", f"| us per full chunk (ns a token) | {head} |", "|---|" + "---:|" * len(cols)]
        for k in CLASSES:
            if any(s["class_us"].get(k) for *_, s in cols):
                L.append(f"| {k} | " + " | ".join(
                    f"{number(s['class_us'].get(k), 1)} ({number(s['class_ns_per_token'].get(k), 1)})"
                    for *_, s in cols) + " |")
        L.append("| **GPU kernel time** | " + " | ".join(f"**{number(s['gpu_kernel_time_us'], 1)}**"
                                                       for *_, s in cols) + " |")
        for label, cell in ROWS:
            L.append(f"| {label} | " + " | ".join(cell(s) for *_, s in cols) + " |")
        L.append("")
    return L
