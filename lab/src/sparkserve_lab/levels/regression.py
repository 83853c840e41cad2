"""Level 5, regression: a run against the stored baseline of the same hardware and configuration.

Fails when any test present in both runs lost more than `max_drop` (default 3%) of its prefill or decode
throughput (the median request of each run, robust to one slow request), when the run has no value for a
metric its baseline measured (nothing to compare is not "no regression"), or when memory in use grew by
more than `max_mem_growth_bytes` (default 1 GB). Memory is the GPU memory in use when the metadata has
it, else the server process tree's RSS (CPU runs).
"""

from __future__ import annotations

from typing import Any

from sparkserve.gate.common import LevelResult
from sparkserve_lab.bench.results import rows
from sparkserve_lab.runstore import Run

GB = 1_000_000_000


def _memory(meta: dict[str, Any]) -> tuple[str, int] | None:
    mem = meta.get("memory") or {}
    for key in ("gpu_memory_used_bytes", "server_rss_bytes"):
        if mem.get(key) is not None:
            return key, int(mem[key])
    return None


def _typical(median: float | None, mean: float | None) -> float | None:
    """The median request when the run kept per-request values, else the mean."""
    return median if median is not None else mean


def compare(
    base_bench: dict[str, Any],
    cand_bench: dict[str, Any],
    base_meta: dict[str, Any],
    cand_meta: dict[str, Any],
    max_drop: float = 0.03,
    max_mem_growth_bytes: int = GB,
    res: LevelResult | None = None,
) -> LevelResult:
    res = res or LevelResult("5", "regression")
    base = {r.key: r for r in rows(base_bench)}
    cand = {r.key: r for r in rows(cand_bench)}
    common = sorted(set(base) & set(cand))
    res.metrics["compared_tests"] = len(common)
    if not common:
        res.add(
            "runs share at least one test",
            False,
            f"baseline tests {sorted(base)} vs run tests {sorted(cand)}",
        )
    deltas = []
    for k in common:
        b, c = base[k], cand[k]
        for what, bv, cv in (("prefill", _typical(b.pp_median, b.pp_tps), _typical(c.pp_median, c.pp_tps)),
                             ("decode", _typical(b.tg_median, b.tg_tps), _typical(c.tg_median, c.tg_tps))):
            if bv is None or bv <= 0:
                continue  # the baseline measured nothing here: there is nothing to hold the run to
            if cv is None:
                res.add(f"{what} {b.label()} within -{max_drop:.0%}", False,
                        f"{bv:.1f} tok/s in the baseline, no value in the run")
                continue
            # Rounded to 1e-6: a drop of exactly max_drop is within it, floating point aside.
            change = round((cv - bv) / bv, 6)
            deltas.append(
                {
                    "test": b.label(),
                    "metric": what,
                    "baseline": round(bv, 2),
                    "run": round(cv, 2),
                    "change": round(change, 4),
                }
            )
            res.add(
                f"{what} {b.label()} within -{max_drop:.0%}",
                change >= -max_drop,
                f"{bv:.1f} -> {cv:.1f} tok/s ({change:+.1%})",
            )
    res.metrics["throughput"] = deltas
    bm, cm = _memory(base_meta), _memory(cand_meta)
    if bm is None or cm is None or bm[0] != cm[0]:
        res.add(
            f"memory growth under {max_mem_growth_bytes / GB:g} GB",
            None,
            "skipped: memory not recorded the same way in both runs",
        )
    else:
        growth = cm[1] - bm[1]
        res.metrics["memory"] = {"kind": bm[0], "baseline": bm[1], "run": cm[1], "growth": growth}
        res.add(
            f"memory growth under {max_mem_growth_bytes / GB:g} GB",
            growth <= max_mem_growth_bytes,
            f"{bm[0]}: {bm[1] / GB:.2f} -> {cm[1] / GB:.2f} GB ({growth / GB:+.2f} GB)",
        )
    return res


def run(baseline: Run, candidate: Run, max_drop: float = 0.03, max_mem_growth_bytes: int = GB) -> LevelResult:
    res = LevelResult("5", "regression")
    res.metrics.update(
        baseline=f"{baseline.hardware}/{baseline.run_id}",
        run=f"{candidate.hardware}/{candidate.run_id}",
        max_drop=max_drop,
    )
    res.add(
        "same hardware",
        baseline.hardware == candidate.hardware,
        f"{baseline.hardware} vs {candidate.hardware}",
    )
    res.add(
        "same configuration",
        baseline.configuration == candidate.configuration,
        f"{baseline.configuration} vs {candidate.configuration}",
    )
    res.add("baseline is not a failed-validation run", baseline.status() != "invalid", baseline.status())
    res.add("run is not a failed-validation run", candidate.status() != "invalid", candidate.status())
    bb, cb = baseline.bench(), candidate.bench()
    if bb is None or cb is None:
        res.add(
            "both runs have llama-benchy results", False, f"baseline {bb is not None}, run {cb is not None}"
        )
        return res
    return compare(bb, cb, baseline.metadata(), candidate.metadata(), max_drop, max_mem_growth_bytes, res)
