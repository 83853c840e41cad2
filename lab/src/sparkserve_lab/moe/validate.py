"""`sparkserve validate moe`: the installed FlashInfer CUTLASS fused MoE against the PyTorch reference, at
token counts that are and are not bucket sizes, with FlashInfer's default tactics (what an untuned start
runs) and, with --all-tactics, with every tactic its autotuner could pick."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.serving.moe import tactics as tmod
from sparkserve_lab.moe import compare, weights
from sparkserve_lab.moe.backend import Backend

DEFAULT_TOKENS = (1, 7, 64, 333, 2048)
RESULT = "validate.json"


@dataclass
class Check:
    tokens: int
    profile_ids: list[int]
    labels: list[str]
    agreement: dict[str, Any] | None = None
    ok: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "profile_ids": self.profile_ids, "labels": self.labels,
                "agreement": self.agreement, "ok": self.ok, "error": self.error}


def _labels(listing: tmod.TacticList | None, ids: list[int]) -> list[str]:
    return [listing.get(ids[0], 1).label(), listing.get(ids[1], 2).label()] if listing else ["?", "?"]


def run(b: Backend, tokens: tuple[int, ...], seed: int, all_tactics: bool, tolerance: float | None,
        out_dir: Path, say: Callable[[str], None] = print) -> tuple[bool, dict[str, Any]]:
    tol = tolerance if tolerance is not None else compare.TOLERANCE[b.activation]
    s = b.shape
    checks: list[Check] = []
    space = None
    for n in tokens:
        x = weights.random_input(n, s, seed=seed * 1_000_003 + n)
        ids, w = weights.random_routing(n, s.experts, s.top_k, seed=seed * 1_000_003 + n + 1)
        b.bucket(x, ids, w)
        if space is None:
            space = b.space()
        ref = b.reference()
        pairs = [[-1, -1]]
        if all_tactics:
            pairs += [[g1, -1] for g1 in space.gemm1] + [[-1, g2] for g2 in space.gemm2]
        for pair in pairs:
            c = Check(n, pair, _labels(space.listing, pair))
            try:
                out = b.run(pair)
            except Exception as exc:  # FlashInfer's own error types
                lines = str(exc).strip().splitlines()
                c.error = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
            else:
                a = compare.agree(out, ref)
                c.agreement, c.ok = a.to_dict(), a.ok(tol)
            checks.append(c)
            what = c.error or (compare.Agreement(**c.agreement).line() if c.agreement else "")
            mark = "ok   " if c.ok else "ERROR" if c.error else "WRONG"
            say(f"  {n:>5} tokens [{pair[0]:>4},{pair[1]:>4}] {mark} {' | '.join(c.labels)}: {what}")
    wrong = [c for c in checks if not c.ok and c.error is None]
    default_bad = [c for c in checks if c.profile_ids == [-1, -1] and not c.ok]
    ok = not wrong and not default_bad
    result = {
        "verdict": "pass" if ok else "fail", "path": b.path, "path_description": tmod.PATHS[b.path],
        "device": b.device.to_dict(), "shape": b.shape.to_dict(), "activation": b.activation,
        "tolerance_rel_l2": tol, "tokens": list(tokens), "all_tactics": all_tactics,
        "tactic_counts": list(space.counts) if space else None,
        "tactic_list": space.listing.variant if space and space.listing else None,
        "summary": {"checks": len(checks), "correct": sum(c.ok for c in checks), "wrong": len(wrong),
                    "errors": sum(c.error is not None for c in checks)},
        "checks": [c.to_dict() for c in checks],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULT).write_text(json.dumps(result, indent=2) + "\n")
    return ok, result
