"""What a batch of concurrent requests cost end to end, from llama-benchy's progress events.

llama-benchy's JSON reports prefill and decode rates and time to first token, but not how long a whole
batch took: under load a profile can decode faster per request and still finish its batches no sooner,
because its prefill holds every request's first token back. Its `--emit-progress` events carry a
timestamp and the test of every timed request (warm-up requests emit none), so one batch is the requests
of one (depth, prompt, response, concurrency, run) test run, and its end-to-end throughput is the tokens
they generated over the batch's wall time, from the first request's start to the last request's end.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkserve_lab import gzfile

Test = tuple[int, int, int, int]  # llama-benchy's (depth, prompt, response, concurrency)


@dataclass(frozen=True)
class Batch:
    test: Test
    run_index: int
    requests: int
    generated: int  # tokens the batch's requests generated
    wall_s: float  # first request's start to last request's end
    errors: int

    @property
    def e2e_tps(self) -> float | None:
        return self.generated / self.wall_s if self.wall_s > 0 and self.generated else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "test": list(self.test), "e2e_tps": self.e2e_tps}


def read_events(path: Path) -> list[dict[str, Any]]:
    """The JSONL events of a progress file (a torn last line, as a killed run leaves it, is dropped)."""
    out = []
    for line in gzfile.read_text(path).splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def batches(events: list[dict[str, Any]]) -> list[Batch]:
    """One Batch per test run whose requests all started and ended, in the order they started."""
    started: dict[Any, dict[str, Any]] = {}
    ended: dict[Any, dict[str, Any]] = {}
    for ev in events:
        kind, rid = ev.get("type"), ev.get("request_id")
        if kind == "request_start" and rid is not None:
            started[rid] = ev
        elif kind == "request_end" and rid is not None:
            ended[rid] = ev
    groups: dict[tuple[Test, int], list[Any]] = {}
    for rid, ev in started.items():
        test = (int(ev.get("context_size") or 0), int(ev["prompt_size"]), int(ev["response_size"]),
                int(ev["concurrency"]))
        groups.setdefault((test, int(ev.get("run_index") or 0)), []).append(rid)
    found: list[tuple[float, Batch]] = []
    for (test, run_index), rids in groups.items():
        if any(rid not in ended for rid in rids):
            continue  # a batch cut off by a timeout or a crash: no end-to-end time
        start = min(float(started[r]["ts"]) for r in rids)
        end = max(float(ended[r]["ts"]) for r in rids)
        ok = [r for r in rids if not ended[r].get("error")]
        found.append((start, Batch(test, run_index, len(rids), sum(int(ended[r].get("total_tokens") or 0)
                                                                   for r in ok),
                                   end - start, len(rids) - len(ok))))
    return [b for _, b in sorted(found, key=lambda x: x[0])]


def e2e_values(data: dict[str, Any] | None, test: Test) -> list[float]:
    """End-to-end tok/s of each batch of one test from a stored `batches.json`."""
    out = []
    for b in (data or {}).get("batches") or []:
        if tuple(b.get("test") or ()) == test and b.get("e2e_tps") and not b.get("errors"):
            out.append(float(b["e2e_tps"]))
    return out


def summary(found: list[Batch]) -> dict[str, Any]:
    """The stored form: every batch, and per test the median end-to-end tok/s."""
    per: dict[Test, list[float]] = {}
    for b in found:
        if b.e2e_tps is not None and not b.errors:
            per.setdefault(b.test, []).append(b.e2e_tps)
    return {
        "what": "end-to-end throughput: tokens a batch generated / (last request's end - first request's "
                "start), from llama-benchy's progress events",
        "batches": [b.to_dict() for b in found],
        "median_e2e_tps": [{"test": list(t), "median": statistics.median(v), "n": len(v)}
                           for t, v in sorted(per.items())],
    }
