"""llama-benchy's JSON (`--format json`), flattened to one row per (depth, pp, tg, concurrency) test."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from sparkserve.errors import SparkserveError


@dataclass(frozen=True)
class Row:
    depth: int
    pp: int
    tg: int
    concurrency: int
    pp_tps: float | None  # prefill tokens/s (total over the batch)
    pp_std: float | None
    tg_tps: float | None  # decode tokens/s (total over the batch)
    tg_std: float | None
    tg_req_tps: float | None  # decode tokens/s per request
    ttfr_ms: float | None
    samples: int
    pp_median: float | None = None  # the median request: what level 5 compares (one slow request
    tg_median: float | None = None  # moves a mean of three by a third of its excursion)
    ttft_median_ms: float | None = None  # the median request's time to its first token
    e2e_tps: float | None = None  # the median batch's generated tokens / its wall time (bench.batches)

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (self.depth, self.pp, self.tg, self.concurrency)

    def label(self) -> str:
        d = f" @ d{self.depth}" if self.depth else ""
        c = f" c{self.concurrency}" if self.concurrency > 1 else ""
        return f"pp{self.pp}/tg{self.tg}{d}{c}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _metric(run: dict[str, Any], name: str) -> tuple[float | None, float | None, int]:
    m = run.get(name)
    if not isinstance(m, dict) or m.get("mean") is None:
        return None, None, 0
    return float(m["mean"]), float(m.get("std") or 0.0), len(m.get("values") or [])


def _median(run: dict[str, Any], name: str) -> float | None:
    m = run.get(name)
    values = [float(v) for v in (m.get("values") or [])] if isinstance(m, dict) else []
    return statistics.median(values) if values else None


def rows(data: dict[str, Any], batch_data: dict[str, Any] | None = None) -> list[Row]:
    """The measured tests (context-load phases of prefix-caching runs are left out); `batch_data`: the
    run's batches.json, for each test's end-to-end throughput."""
    from sparkserve_lab.bench.batches import e2e_values

    out = []
    for run in data.get("benchmarks") or []:
        if run.get("is_context_prefill_phase"):
            continue
        pp, pps, n1 = _metric(run, "pp_throughput")
        tg, tgs, n2 = _metric(run, "tg_throughput")
        tgr, _, _ = _metric(run, "tg_req_throughput")
        ttfr, _, _ = _metric(run, "ttfr")
        test = (int(run["context_size"]), int(run["prompt_size"]), int(run["response_size"]),
                int(run["concurrency"]))
        e2e = e2e_values(batch_data, test)
        out.append(
            Row(
                int(run["context_size"]),
                int(run["prompt_size"]),
                int(run["response_size"]),
                int(run["concurrency"]),
                pp,
                pps,
                tg,
                tgs,
                tgr,
                ttfr,
                max(n1, n2),
                _median(run, "pp_throughput"),
                _median(run, "tg_throughput"),
                _median(run, "e2e_ttft"),
                statistics.median(e2e) if e2e else None,
            )
        )
    return out


def require_results(data: dict[str, Any] | None, where: str) -> list[Row]:
    """llama-benchy exits 0 after "No results collected": treat an empty result as a failure."""
    if not data:
        raise SparkserveError(f"{where}: llama-benchy wrote no result file")
    got = rows(data)
    if not got or all(r.pp_tps is None and r.tg_tps is None for r in got):
        raise SparkserveError(
            f"{where}: llama-benchy collected no results (every request failed or "
            "produced no tokens); see llama-benchy.log next to it"
        )
    return got
