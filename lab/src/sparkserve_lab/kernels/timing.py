"""Kernel timing that does not flatter: weights rotate through enough copies that a copy has left L2
before it is read again, and every result says how many copies were used against which L2 size.

Inside the model 36 layers stream through between two uses of one layer's weights, so a kernel never
finds its weights in L2; replaying one GEMM on one weight set does (a 29.5 MB BF16 QKV fits the H100's
50 MB L2). `rotation` asks for copies that together hold at least twice the L2.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

L2_FACTOR = 2.0  # the rotated copies hold this many times the L2


def copies_needed(bytes_per_copy: int, l2_bytes: int, factor: float = L2_FACTOR) -> int:
    """Copies whose weights together hold `factor` x the L2, plus one so a reuse distance never fits."""
    if bytes_per_copy <= 0:
        raise ValueError("bytes_per_copy must be positive")
    return max(1, math.ceil(factor * l2_bytes / bytes_per_copy)) + (1 if bytes_per_copy < l2_bytes else 0)


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    max_us: float
    copies: int
    rotated_bytes: int
    l2_bytes: int
    calls_per_graph: int
    replays: int

    @property
    def l2_note(self) -> str:
        return (f"{self.copies} weight cop{'y' if self.copies == 1 else 'ies'} rotated "
                f"({self.rotated_bytes / 1e6:.1f} MB, {self.rotated_bytes / self.l2_bytes:.1f}x the "
                f"{self.l2_bytes / 1e6:.0f} MB L2)")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "l2_note": self.l2_note}


def capture(calls: Sequence[Callable[[], object]], n: int) -> Any:
    """A CUDA graph of `n` calls cycling through `calls`, after one eager run of each on a side stream
    (lazy initialisation and autotuning stay out of the graph)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            calls[i % len(calls)]()
    return graph


def graph_time(calls: list[Callable[[], object]], bytes_per_call: int, l2_bytes: int, replays: int = 30,
               min_calls: int = 20) -> Timing:
    """Per-call time of a CUDA graph that cycles through `calls` (one per weight copy), replayed
    `replays` times, each replay timed with CUDA events."""
    import torch

    n = max(min_calls, len(calls))
    n += (-n) % len(calls)  # whole cycles: every copy as often as the others
    graph = capture(calls, n)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / n)
    return Timing(statistics.median(times), min(times), max(times), len(calls), bytes_per_call * len(calls),
                  l2_bytes, n, replays)


def copy_bandwidth(nbytes: int = 4 << 30, reps: int = 10) -> float:
    """Bytes per second of a device-to-device copy of `nbytes`, counting the read and the write: what a
    kernel that streams its bytes once can hope for."""
    import torch

    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        b.copy_(a)
    end.record()
    end.synchronize()
    return float(2 * nbytes * reps / (start.elapsed_time(end) / 1000))


def l2_bytes() -> int:
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
