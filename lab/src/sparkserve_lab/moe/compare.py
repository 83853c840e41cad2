"""How close a kernel's MoE output is to the reference, and what counts as agreement.

The reference emulates every rounding the kernel makes on purpose (MXFP8 inputs, bf16 GEMM1 output,
MXFP8 or bf16 fc2 input), so what remains is accumulation order, the bf16 output, and the few MXFP8
values of the fc2 input that land on the other side of a rounding boundary. The relative L2 error bounds
all of it; a kernel that drops a block scale, swaps up and gate, skips the clamp or misroutes one expert
lands far above it (tests/unit/test_moe_reference.py measures both sides on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Relative L2 error a kernel output may have against the reference.
TOLERANCE = {"mxfp8": 2.5e-2, "bf16": 1e-2}


@dataclass(frozen=True)
class Agreement:
    rel_l2: float
    max_abs: float
    ref_max_abs: float
    cosine: float
    nonfinite: int

    def ok(self, tolerance: float) -> bool:
        return self.nonfinite == 0 and self.rel_l2 <= tolerance

    def to_dict(self) -> dict[str, float | int]:
        return {"rel_l2": self.rel_l2, "max_abs": self.max_abs, "ref_max_abs": self.ref_max_abs,
                "cosine": self.cosine, "nonfinite": self.nonfinite}

    def line(self) -> str:
        bad = f", {self.nonfinite} non-finite" if self.nonfinite else ""
        return (f"rel L2 {self.rel_l2:.2e}, max |diff| {self.max_abs:.3g} "
                f"(max |ref| {self.ref_max_abs:.3g}), cosine {self.cosine:.6f}{bad}")


def agree(out: torch.Tensor, ref: torch.Tensor) -> Agreement:
    o = out.to(torch.float64)
    r = ref.to(torch.float64).to(o.device)
    nonfinite = int((~torch.isfinite(o)).sum())
    o = torch.nan_to_num(o, nan=0.0, posinf=0.0, neginf=0.0)
    diff = o - r
    rn = float(r.norm())
    on = float(o.norm())
    return Agreement(
        rel_l2=float(diff.norm()) / rn if rn else float(diff.norm()),
        max_abs=float(diff.abs().max()) if diff.numel() else 0.0,
        ref_max_abs=float(r.abs().max()) if r.numel() else 0.0,
        cosine=float((o * r).sum()) / (on * rn) if on and rn else 0.0,
        nonfinite=nonfinite,
    )
