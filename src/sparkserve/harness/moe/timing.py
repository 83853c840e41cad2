"""CUDA-graph timing of a list of calls (one per weight copy, see `rotation`): the calls are run once
eagerly, captured into one graph, replayed `warmup` times, then timed in `repeats` batches of `replays`
replays with CUDA events; the result is the median batch, per call, in microseconds. GPU only."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from sparkserve.harness.kernels.timing import capture


def graph_time_us(calls: Sequence[Callable[[], object]], replays: int = 20, warmup: int = 3,
                  repeats: int = 3) -> float:
    event_cls: Any = torch.cuda.Event
    graph = capture(calls, len(calls))
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    batches = []
    for _ in range(repeats):
        start, end = event_cls(enable_timing=True), event_cls(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        batches.append(start.elapsed_time(end) * 1000.0 / (replays * len(calls)))
    del graph
    return float(statistics.median(batches))
