"""How many weight copies a timing rotates through so that it measures reads from memory, not from L2.

One call of the fused MoE reads the weights of the experts its tokens are routed to. A CUDA graph that
replays the same call on one copy would find those weights in L2 after the first replay (a decode step
with 4 experts of gpt-oss-120b touches about 52 MB; an H100 has 50 MB of L2, a GB10 24 MB). The graph
therefore holds one call per copy, each on its own copy, so one replay reads `copies x touched` bytes:
at least `factor` times the L2. Pure arithmetic, so it is tested on a CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_FACTOR = 4.0
MIN_COPIES = 2


@dataclass(frozen=True)
class Rotation:
    copies: int
    bytes_per_copy: int
    touched_per_call: int
    l2_bytes: int

    @property
    def reads_per_replay(self) -> int:
        return self.copies * self.touched_per_call

    def l2_multiple(self) -> float:
        return self.reads_per_replay / self.l2_bytes if self.l2_bytes else math.inf

    def note(self) -> str:
        gib = self.copies * self.bytes_per_copy / 2**30
        return (f"weights rotated across {self.copies} copies ({gib:.1f} GiB): one graph replay runs "
                f"{self.copies} calls, each on its own copy, reading {self.reads_per_replay / 2**20:.0f} MiB "
                f"of expert weights, {self.l2_multiple():.1f}x the {self.l2_bytes / 2**20:.0f} MiB L2")

    def to_dict(self) -> dict[str, object]:
        return {"copies": self.copies, "bytes_per_copy": self.bytes_per_copy,
                "touched_per_call": self.touched_per_call, "l2_bytes": self.l2_bytes,
                "l2_multiple": round(self.l2_multiple(), 2), "note": self.note()}


def experts_touched(tokens: int, top_k: int, experts: int) -> int:
    """Distinct experts a call reads at most (all of them once tokens x top_k reaches the count)."""
    return min(experts, tokens * top_k)


def plan(bytes_per_copy: int, bytes_per_expert: int, tokens: int, top_k: int, experts: int, l2_bytes: int,
         budget_bytes: int, factor: float = DEFAULT_FACTOR) -> Rotation:
    """The copies for one bucket: enough for `factor` x L2 per replay, at least MIN_COPIES, at most what
    `budget_bytes` of device memory holds (never below one)."""
    touched = experts_touched(tokens, top_k, experts) * bytes_per_expert
    want = max(MIN_COPIES, math.ceil(factor * l2_bytes / max(touched, 1)))
    cap = max(1, budget_bytes // max(bytes_per_copy, 1))
    return Rotation(min(want, cap), bytes_per_copy, touched, l2_bytes)
