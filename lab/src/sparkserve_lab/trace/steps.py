"""A trace split into engine steps, and what one decode step costs.

A step is the time from one of the worker's step annotations to the next (the annotation covers
execute_model; sampling and bookkeeping of the same step run after it, before the next one starts). GPU
work belongs to the step during which the host launched it. Per step: the time in each kernel class
(the sum of its kernels' durations), the number of kernels, the GPU's idle time inside the step's span
and before it (since the previous step's last kernel), the host's time in the annotation and the
step's period (annotation start to the next one), and how many CUDA-graph launches it made."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab.trace.classify import CLASSES, Rules, classify_sequence
from sparkserve_lab.trace.trace import Annotation, GpuEvent, Trace


@dataclass
class Step:
    annotation: Annotation
    ctx_reqs: int
    gen_reqs: int
    gen_tokens: int
    period_us: float | None  # to the next step's annotation
    ctx_tokens: int = 0  # prompt tokens the step computes (a prefill chunk's)
    events: list[GpuEvent] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    graph_launches: int = 0
    kernel_launches: int = 0  # cudaLaunchKernel-like calls outside graphs

    @property
    def is_decode(self) -> bool:
        return self.ctx_reqs == 0 and self.gen_reqs > 0

    def busy_us(self) -> float:
        """The union of the step's GPU intervals (overlapping kernels counted once)."""
        total, end = 0.0, float("-inf")
        for e in sorted(self.events, key=lambda x: x.ts):
            if e.end <= end:
                continue
            total += e.end - max(e.ts, end)
            end = e.end
        return total

    def span_us(self) -> float:
        if not self.events:
            return 0.0
        return max(e.end for e in self.events) - min(e.ts for e in self.events)

    def class_us(self) -> dict[str, float]:
        out = dict.fromkeys(CLASSES, 0.0)
        for e, c in zip(self.events, self.classes, strict=True):
            out[c] += e.dur
        return out


def split(trace: Trace, rules: Rules) -> list[Step]:
    marks = [a for a in trace.annotations if rules.step_annotation.match(a.name)]
    if not marks:
        raise SparkserveError(
            "no step annotations in the trace (vLLM's worker writes `execute_context_N(..)_generation_M(..)` "
            "while a torch profile runs): was it taken with vLLM's --profiler-config profiler=torch?")
    # one worker: keep the process that wrote the first annotation
    pid = marks[0].pid
    marks = [a for a in marks if a.pid == pid]
    steps: list[Step] = []
    for i, a in enumerate(marks):
        m = rules.step_annotation.match(a.name)
        assert m is not None
        nxt = marks[i + 1].ts if i + 1 < len(marks) else None
        steps.append(Step(a, int(m["ctx_reqs"]), int(m["gen_reqs"]), int(m["gen_tokens"]),
                          nxt - a.ts if nxt is not None else None, int(m["ctx_tokens"])))
    starts = [s.annotation.ts for s in steps]
    import bisect

    for ev in trace.gpu:
        if ev.launch_ts is None:
            continue
        k = bisect.bisect_right(starts, ev.launch_ts) - 1
        if 0 <= k < len(steps) and (k + 1 < len(steps) or ev.launch_ts <= steps[k].annotation.ts
                                    + steps[k].annotation.dur):
            steps[k].events.append(ev)
    for ts, name in trace.launches:
        k = bisect.bisect_right(starts, ts) - 1
        if 0 <= k < len(steps):
            if rules.graph_launch.search(name):
                steps[k].graph_launches += 1
            elif "LaunchKernel" in name or "cuLaunch" in name:
                steps[k].kernel_launches += 1
    for s in steps:
        s.events.sort(key=lambda e: (e.launch_ts or 0.0, e.ts))
        s.classes = classify_sequence([e.name for e in s.events], rules)
    return steps


def _gap_before(steps: list[Step], i: int) -> float | None:
    if i == 0 or not steps[i].events or not steps[i - 1].events:
        return None
    return max(0.0, min(e.ts for e in steps[i].events) - max(e.end for e in steps[i - 1].events))


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else 0.0


def _med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(steps: list[Step], batch: int, skip_first: int = 2) -> dict[str, Any]:
    """The decode steps at `batch` (the first `skip_first` of them and the last, whose period is unknown,
    left out): means per class and medians of the step's totals."""
    idx = [i for i, s in enumerate(steps) if s.is_decode and s.gen_reqs == batch and s.period_us is not None]
    idx = idx[skip_first:] if len(idx) > skip_first + 2 else idx
    if not idx:
        seen = sorted({(s.ctx_reqs, s.gen_reqs) for s in steps})
        raise SparkserveError(f"no decode step at batch {batch} in the trace (steps seen as (context, "
                              f"generation) requests: {seen[:12]})")
    chosen = [steps[i] for i in idx]
    per_class = {c: round(_mean([s.class_us()[c] for s in chosen]), 2) for c in CLASSES}
    counts_by_class = {c: round(_mean([float(s.classes.count(c)) for s in chosen]), 2) for c in CLASSES}
    gaps = [g for i in idx if (g := _gap_before(steps, i)) is not None]
    period = [s.period_us or 0.0 for s in chosen]
    busy = [s.busy_us() for s in chosen]
    span = [s.span_us() for s in chosen]
    kernel_time = [sum(e.dur for e in s.events) for s in chosen]
    med_period = _med(period)
    return {
        "batch": batch,
        "decode_steps": len(chosen),
        "steps_in_trace": len(steps),
        "step_period_us": {"median": _r(med_period), "mean": _r(_mean(period)),
                           "min": _r(min(period)), "max": _r(max(period))},
        "tokens_per_s_per_user_from_period": _r(1e6 / med_period) if med_period else None,
        "tokens_per_s_aggregate_from_period": _r(batch * 1e6 / med_period) if med_period else None,
        "gpu_kernel_time_us": _r(_mean(kernel_time)),
        "gpu_busy_us": _r(_mean(busy)),
        "gpu_idle_in_step_us": _r(_mean([sp - b for sp, b in zip(span, busy, strict=True)])),
        "gpu_idle_between_steps_us": _r(_mean(gaps)) if gaps else None,
        "gpu_idle_total_us": _r(_mean([p - b for p, b in zip(period, busy, strict=True)])),
        "host_execute_model_us": _r(_med([s.annotation.dur for s in chosen])),
        "kernels_per_step": _r(_mean([float(len(s.events)) for s in chosen])),
        "graph_launches_per_step": _r(_mean([float(s.graph_launches) for s in chosen])),
        "eager_launches_per_step": _r(_mean([float(s.kernel_launches) for s in chosen])),
        "class_us": per_class,
        "class_kernels": counts_by_class,
    }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def kernel_table(steps: list[Step], batch: int) -> list[dict[str, Any]]:
    """Every kernel name of the decode steps at `batch`: its class, launches per step and mean time per
    step (what a wrong or missing pattern looks like)."""
    return kernel_rows([s for s in steps if s.is_decode and s.gen_reqs == batch], "step")


def kernel_rows(chosen: list[Step], per: str) -> list[dict[str, Any]]:
    """Every kernel name of `chosen`: its class, launches and mean time per `per` (step, chunk), slowest
    first."""
    n = len(chosen) or 1
    acc: dict[tuple[str, str], list[float]] = {}
    for s in chosen:
        for e, c in zip(s.events, s.classes, strict=True):
            a = acc.setdefault((e.name, c), [0.0, 0.0])
            a[0] += 1
            a[1] += e.dur
    rows = [{"name": k[0][:300], "class": k[1], f"per_{per}": round(v[0] / n, 2),
             f"us_per_{per}": round(v[1] / n, 2)} for k, v in acc.items()]
    return sorted(rows, key=lambda r: -float(r[f"us_per_{per}"]))


def median_step(steps: list[Step], batch: int) -> Step | None:
    chosen = [s for s in steps if s.is_decode and s.gen_reqs == batch and s.period_us is not None]
    if not chosen:
        return None
    chosen.sort(key=lambda s: s.period_us or 0.0)
    return chosen[len(chosen) // 2]


def excerpt(step: Step) -> list[dict[str, Any]]:
    """One step's kernels in launch order, times relative to its first kernel (the summarized trace)."""
    if not step.events:
        return []
    t0 = min(e.ts for e in step.events)
    return [{"name": e.name[:300], "class": c, "start_us": round(e.ts - t0, 2), "dur_us": round(e.dur, 2),
             "launch": e.launch} for e, c in zip(step.events, step.classes, strict=True)]


def reclassify_kept(summary: dict[str, Any], table: list[dict[str, Any]], step: list[dict[str, Any]],
                    rules: Rules) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A batch's breakdown classified again where its raw trace was left out: the kept median step
    (`excerpt`) gets the new classes, each (name, old class) of it that changes moves its kernel-table rows
    (means over the batch's decode steps) from the old class to the new one, and the summary's time and
    kernels per class move with them. Refused where one (name, old class) of the step becomes two classes
    (a kernel whose place differs within the step): only the raw trace can place those."""
    new = classify_sequence([e["name"] for e in step], rules)
    moves: dict[tuple[str, str], str] = {}
    for e, c in zip(step, new, strict=True):
        key = (e["name"], e["class"])
        if moves.setdefault(key, c) != c:
            raise SparkserveError(f"kernel {e['name'][:80]!r} of class {e['class']} becomes both "
                                  f"{moves[key]} and {c} in the kept step: only the raw trace can place it")
    per = next((k[4:] for k in (table[0] if table else {}) if k.startswith("per_")), "step")
    out = {**summary, "class_us": dict(summary["class_us"]), "class_kernels": dict(summary["class_kernels"])}
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for row in table:
        cls = moves.get((row["name"], row["class"]), row["class"])
        if cls != row["class"]:
            for field_, value in (("class_us", f"us_per_{per}"), ("class_kernels", f"per_{per}")):
                out[field_][row["class"]] = round(out[field_][row["class"]] - float(row[value]), 2)
                out[field_][cls] = round(out[field_].get(cls, 0.0) + float(row[value]), 2)
        m = merged.setdefault((row["name"], cls),
                              {**row, "class": cls, f"per_{per}": 0.0, f"us_per_{per}": 0.0})
        for value in (f"per_{per}", f"us_per_{per}"):
            m[value] = round(float(m[value]) + float(row[value]), 2)
    rows = sorted(merged.values(), key=lambda r: -float(r[f"us_per_{per}"]))
    return out, rows, [{**e, "class": c} for e, c in zip(step, new, strict=True)]
