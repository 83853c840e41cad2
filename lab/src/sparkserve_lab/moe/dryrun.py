"""The CPU rehearsal of `moe sweep` and `validate moe` (--dry-run): everything but the kernel launch.

Weights, inputs and routing are made as on the GPU, the reference runs (on the CPU), every tactic of the
path's tactic list goes through the same checks, the table and the run-store record are written and the
table can be installed. The kernel is stood in for by the reference rounded to bf16; a few tactics raise
the way an unsupported CUTLASS configuration does, so the error paths run too; timings come from a cost
model and are marked synthetic everywhere they are shown. Nothing here needs a GPU or FlashInfer.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from sparkserve.serving.moe import tactics as tmod
from sparkserve.serving.moe.shape import MoeShape
from sparkserve_lab.moe import reference
from sparkserve_lab.moe.backend import Device
from sparkserve_lab.moe.kernel import TacticSpace
from sparkserve_lab.moe.reference import Experts
from sparkserve_lab.moe.rotation import Rotation, plan

# The device each path is rehearsed as (L2 and memory size feed the weight-rotation plan).
SIMULATED = {
    tmod.SM90_BF16_MXFP4: Device("CPU dry run as NVIDIA H100 80GB HBM3", "9.0", 50 * 2**20, 80 * 2**30, True),
    tmod.SM120_MXFP8_MXFP4: Device("CPU dry run as NVIDIA GB10", "12.1", 24 * 2**20, 128 * 2**30, True),
}
# Tactics whose index is a multiple of this (after the first) raise, as an unsupported configuration does.
FAIL_EVERY = 29


class DryRunBackend:
    def __init__(self, shape: MoeShape, path: str) -> None:
        if path not in SIMULATED:
            raise KeyError(f"no dry run for path {path!r} (known: {', '.join(SIMULATED)})")
        self.path, self.shape, self.device = path, shape, SIMULATED[path]
        self.listing = tmod.known_lists(path)[0]
        self.experts: Experts | None = None
        self.inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._ref: torch.Tensor | None = None
        self.launches = 0

    @property
    def activation(self) -> str:
        return "mxfp8" if self.path == tmod.SM120_MXFP8_MXFP4 else "bf16"

    def load(self, experts: Experts) -> None:
        self.experts = experts

    def module_status(self) -> dict[str, Any]:
        return {"module": None, "state": "CPU dry run: no FlashInfer module is loaded"}

    def bucket(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> None:
        self.inputs = (x, ids, weights)
        self._ref = None

    def reference(self) -> torch.Tensor:
        assert self.inputs is not None and self.experts is not None
        if self._ref is None:
            s = self.shape
            self._ref = reference.moe(*self.inputs, self.experts, self.activation, s.swiglu_alpha,
                                      s.swiglu_beta, s.swiglu_limit)
        return self._ref

    def space(self) -> TacticSpace:
        return TacticSpace(self.listing.counts, [t.index for t in self.listing.gemm1],
                           [t.index for t in self.listing.gemm2], self.listing)

    def _check(self, profile_ids: list[int] | None) -> None:
        for i in profile_ids or []:
            if i > 0 and i % FAIL_EVERY == 0:
                raise RuntimeError(f"dry run: tactic {i} raises as an unsupported CUTLASS configuration "
                                   "would")

    def run(self, profile_ids: list[int] | None) -> torch.Tensor:
        self._check(profile_ids)
        self.launches += 1
        return self.reference().to(torch.bfloat16)

    def rotation(self, tokens: int) -> Rotation:
        assert self.experts is not None
        per_copy = self.experts.nbytes()
        return plan(per_copy, per_copy // max(self.experts.count, 1), tokens, self.shape.top_k,
                             self.shape.experts, self.device.l2_bytes, self.device.memory_bytes // 2)

    def time_us(self, profile_ids: list[int] | None, rot: Rotation, replays: int, warmup: int,
                repeats: int) -> float:
        """Synthetic: weight bytes at 3 TB/s plus a penalty for tiles that fit the routed rows badly."""
        self._check(profile_ids)
        assert self.inputs is not None
        tokens = int(self.inputs[0].shape[0])
        rows_per_expert = max(1.0, tokens * self.shape.top_k / self.shape.experts)
        total = rot.touched_per_call / 3e12 * 1e6
        for gemm, idx in ((1, (profile_ids or [-1, -1])[0]), (2, (profile_ids or [-1, -1])[1])):
            t = self.listing.get(idx, gemm)
            n = t.tile[0] if not t.swap_ab else t.tile[1]  # the tile side that covers the tokens
            waste = abs(math.log2(n) - math.log2(rows_per_expert))
            total += 4.0 + waste * (1.0 + 0.02 * rows_per_expert) + 0.1 * t.cluster[0] * t.cluster[1]
        return float(round(total, 3))
