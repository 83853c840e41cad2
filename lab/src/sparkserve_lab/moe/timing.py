"""CUDA-graph timing of a list of calls (one per weight copy, see `rotation`): the calls are run once
eagerly, captured into one graph, replayed `warmup` times, then timed in `repeats` batches of `replays`
replays with CUDA events; the result is the median batch, per call, in microseconds. GPU only.

A tactic that is slow for the bucket (a 256-wide token tile on 64 tokens takes ~0.1 s a call on an H100) gets
fewer replays per batch, at least MIN_REPLAYS, so that one batch takes about BATCH_MS: the warm-up replays,
timed, decide. The median of `repeats` batches is still the result; only the averaging within a batch is
shorter, for a tactic that the sweep will never choose anyway."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

MIN_REPLAYS = 3
BATCH_MS = 200.0


def replays_for(per_replay_ms: float, replays: int) -> int:
    """Replays per batch: `replays`, fewer when that would take longer than BATCH_MS, at least MIN_REPLAYS."""
    if per_replay_ms <= 0:
        return replays
    return max(MIN_REPLAYS, min(replays, int(BATCH_MS / per_replay_ms)))


def graph_time_us(calls: Sequence[Callable[[], object]], replays: int = 20, warmup: int = 3,
                  repeats: int = 3) -> float:
    import torch

    from sparkserve_lab.kernels.timing import capture

    event_cls: Any = torch.cuda.Event
    graph = capture(calls, len(calls))
    torch.cuda.synchronize()
    w0, w1 = event_cls(enable_timing=True), event_cls(enable_timing=True)
    warmup = max(1, warmup)  # at least one timed warm-up replay decides the batch size
    w0.record()
    for _ in range(warmup):
        graph.replay()
    w1.record()
    w1.synchronize()
    replays = replays_for(w0.elapsed_time(w1) / warmup, replays)
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
