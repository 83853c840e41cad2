"""The events of a torch profiler trace (Chrome trace JSON, optionally gzipped) that a step breakdown
needs: GPU work (kernels, memcpy, memset), the host calls that launched it (matched by correlation id)
and the worker's per-step annotations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab import gzfile

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
ANNOTATION_CATEGORIES = ("user_annotation", "cpu_op", "python_function")


@dataclass(frozen=True)
class GpuEvent:
    name: str
    kind: str  # kernel, memcpy, memset
    ts: float  # us
    dur: float  # us
    correlation: int | None
    launch_ts: float | None  # the host call that launched it (us), when the trace has it
    launch: str | None  # that call's name (cudaLaunchKernel, cudaGraphLaunch, ...)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class Annotation:
    name: str
    ts: float
    dur: float
    pid: Any
    tid: Any


@dataclass(frozen=True)
class Trace:
    gpu: list[GpuEvent]  # by start time
    annotations: list[Annotation]  # by start time
    launches: list[tuple[float, str]]  # every host launch call (ts, name), by time


def load_events(path: Path) -> list[dict[str, Any]]:
    try:
        raw = gzfile.read_bytes(path)
        data = json.loads(raw)
    except (OSError, ValueError, EOFError) as exc:
        raise SparkserveError(f"unreadable profiler trace {path}: {exc}") from exc
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise SparkserveError(f"{path}: no traceEvents list")
    return [e for e in events if isinstance(e, dict)]


def _corr(ev: dict[str, Any]) -> int | None:
    v = (ev.get("args") or {}).get("correlation")
    return int(v) if isinstance(v, int | float) else None


def parse(events: list[dict[str, Any]]) -> Trace:
    launch_by_corr: dict[int, tuple[float, str]] = {}
    launches: list[tuple[float, str]] = []
    annotations: list[Annotation] = []
    raw_gpu: list[dict[str, Any]] = []
    for ev in events:
        if ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        if cat in GPU_CATEGORIES:
            raw_gpu.append(ev)
        elif cat in LAUNCH_CATEGORIES:
            ts, name = float(ev.get("ts", 0)), str(ev.get("name", ""))
            launches.append((ts, name))
            c = _corr(ev)
            if c is not None:
                launch_by_corr[c] = (ts, name)
        elif cat in ANNOTATION_CATEGORIES and isinstance(ev.get("name"), str):
            annotations.append(Annotation(ev["name"], float(ev.get("ts", 0)), float(ev.get("dur", 0)),
                                          ev.get("pid"), ev.get("tid")))
    gpu = []
    for ev in raw_gpu:
        c = _corr(ev)
        launch = launch_by_corr.get(c) if c is not None else None
        gpu.append(GpuEvent(str(ev.get("name", "")), GPU_CATEGORIES[str(ev.get("cat")).lower()],
                            float(ev.get("ts", 0)), float(ev.get("dur", 0)), c,
                            launch[0] if launch else None, launch[1] if launch else None))
    gpu.sort(key=lambda g: g.ts)
    annotations.sort(key=lambda a: a.ts)
    launches.sort()
    return Trace(gpu, annotations, launches)


def load(path: Path) -> Trace:
    return parse(load_events(path))
