"""What speculation costs and gains, independently of any draft's quality.

One decode step without speculation takes `t_base` seconds and yields one token. With k speculative
tokens a step drafts k tokens and verifies k + 1 in the target; it yields the acceptance length tau (1 to
k + 1) tokens. Its time is measured at the two ends: T0 at zero acceptance (a random draft: every draft
token rejected, tau0 ~ 1) and T1 at full acceptance (the measurement-only synthetic switch: tau1 = k + 1).
Between them the step time is taken as linear in tau (what changes with tau is how many positions the next
step's KV cache and drafter advance; the verify shape is the same), so

    T(tau)      = T0 + s * (tau - tau0),          s = (T1 - T0) / (tau1 - tau0)
    tok/s(tau)  = tau / T(tau)
    break-even  : tau / T(tau) = 1 / t_base   =>  tau* = (T0 - s * tau0) / (t_base - s)

tau* is the acceptance length a draft must reach at this k for speculation to be as fast as none; a k
whose tau* is above k + 1 (or whose s is at least t_base) can never pay. With only the zero-acceptance end
measured, s is taken as 0 and tau* = T0 / t_base: the step time does not grow with acceptance.

Pure functions; the measured points come from runs.cost (docs/GPU.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkserve.errors import SparkserveError


@dataclass(frozen=True)
class Point:
    """One measured configuration: k speculative tokens (0: off), `mode` zero/full/off, decode tok/s at
    batch 1, and the acceptance length the engine counted meanwhile (1 without speculation)."""

    k: int
    mode: str
    tok_s: float
    acceptance_length: float

    @property
    def step_s(self) -> float:
        return self.acceptance_length / self.tok_s


@dataclass(frozen=True)
class Cost:
    """The step-time line of one k."""

    k: int
    t_base: float
    t0: float
    tau0: float
    t1: float | None
    tau1: float | None

    @property
    def slope(self) -> float:
        if self.t1 is None or self.tau1 is None or self.tau1 <= self.tau0:
            return 0.0
        return (self.t1 - self.t0) / (self.tau1 - self.tau0)

    def step_s(self, tau: float) -> float:
        return self.t0 + self.slope * (tau - self.tau0)

    def tok_s(self, tau: float) -> float:
        if not 1.0 <= tau <= self.k + 1:
            raise SparkserveError(f"k={self.k}: an acceptance length is from 1 to {self.k + 1}, not {tau}")
        return tau / self.step_s(tau)

    def speedup(self, tau: float) -> float:
        return self.tok_s(tau) * self.t_base

    def break_even(self) -> float | None:
        """The acceptance length at which speculation with this k is as fast as none; None when no
        acceptance length up to k + 1 reaches it."""
        s = self.slope
        if s >= self.t_base:
            return None
        tau = (self.t0 - s * self.tau0) / (self.t_base - s)
        tau = max(tau, 1.0)
        return tau if tau <= self.k + 1 else None


def costs(points: Iterable[Point]) -> list[Cost]:
    """One Cost per k that has a zero-acceptance point, against the off point (required)."""
    pts = list(points)
    base = [p for p in pts if p.k == 0]
    if len(base) != 1:
        raise SparkserveError(f"need exactly one measurement without speculation, got {len(base)}")
    t_base = base[0].step_s
    out = []
    for k in sorted({p.k for p in pts if p.k > 0}):
        zero = [p for p in pts if p.k == k and p.mode == "zero"]
        full = [p for p in pts if p.k == k and p.mode == "full"]
        if len(zero) != 1 or len(full) > 1:
            raise SparkserveError(f"k={k}: need one zero-acceptance point and at most one full one")
        z, f = zero[0], (full[0] if full else None)
        out.append(Cost(k, t_base, z.step_s, z.acceptance_length,
                        f.step_s if f else None, f.acceptance_length if f else None))
    return out


@dataclass(frozen=True)
class Published:
    """An acceptance length a draft's publisher reports, at their k and on their prompts."""

    draft: str
    k: int
    acceptance_length: float
    where: str
    source: str


# What gpt-oss-120b Eagle3 drafts' publishers report (/work/shared/ANCHORS.md and the model cards). None is
# nvidia/gpt-oss-120b-Eagle3-v2, the default draft: no acceptance length of it was found.
PUBLISHED = (
    Published("Dogacel/specdrift-gpt-oss-120b-eagle3", 3, 2.41, "MT-Bench, SGLang, H100, batch 1",
              "its model card (ANCHORS: 212 -> 285 tok/s)"),
    Published("nebius/EAGLE3-gpt-oss-120b", 7, 2.81, "MT-Bench + HumanEval + GSM8K, temperature 0",
              "its model card"),
)


def estimates(table: Sequence[Cost], published: Iterable[Published] = PUBLISHED) -> list[dict[str, Any]]:
    """The speed-up each published acceptance length would give at its k with the measured costs; a k
    that was not measured has no estimate (said so, not extrapolated)."""
    by_k = {c.k: c for c in table}
    out = []
    for pub in published:
        c = by_k.get(pub.k)
        row: dict[str, Any] = {"draft": pub.draft, "k": pub.k, "acceptance_length": pub.acceptance_length,
                               "where": pub.where, "source": pub.source}
        if c is None:
            row["estimate"] = None
            row["why"] = f"k={pub.k} was not measured"
        elif not 1.0 <= pub.acceptance_length <= c.k + 1:
            row["estimate"] = None
            row["why"] = f"acceptance length outside 1..{c.k + 1}"
        else:
            tau = pub.acceptance_length
            row["estimate"] = {"tok_s": c.tok_s(tau), "speedup": c.speedup(tau)}
        out.append(row)
    return out


def markdown(table: Sequence[Cost], hardware: str) -> str:
    """The cost table and the tok/s curve as the report shows them."""
    if not table:
        return "no measurements\n"
    lines = [f"Measured on {hardware}, batch 1 decode (no speculation: {1 / table[0].t_base:.1f} tok/s); "
             "the step time is linear in tau between the measured ends.", "",
             "| k | step at zero acceptance, ms | step at full acceptance, ms | break-even tau | "
             "tok/s at tau = 1, 2, ..., k+1 |",
             "|---|---|---|---|---|"]
    for c in table:
        full = "not measured" if c.t1 is None or c.tau1 is None else f"{c.t1 * 1e3:.2f} (tau {c.tau1:.2f})"
        be = c.break_even()
        curve = ", ".join(f"{c.tok_s(float(t)):.1f}" for t in range(1, c.k + 2))
        lines.append(f"| {c.k} | {c.t0 * 1e3:.2f} (tau {c.tau0:.2f}) | {full} | "
                     f"{'never' if be is None else f'{be:.2f}'} | {curve} |")
    return "\n".join(lines) + "\n"
