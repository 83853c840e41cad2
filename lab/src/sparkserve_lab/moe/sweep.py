"""`sparkserve moe sweep`: time and check every tactic of FlashInfer's CUTLASS fused MoE per token bucket
and make a tactic table of the fastest correct ones.

Per bucket (seeded random gpt-oss-shaped weights, inputs and routing; the weights are made once):
  1. the reference output (`reference.moe`, on the device);
  2. FlashInfer's default pair (profile [-1, -1]: the first GEMM1 and the first GEMM2 candidate, what an
     untuned start runs);
  3. every GEMM1 tactic FlashInfer's autotuner would try (its occupancy and shape filters; --every-index:
     all of them), with the default GEMM2 tactic;
  4. every GEMM2 tactic with the fastest correct GEMM1 tactic (the two GEMMs are separate kernels, so
     their times add);
each run eagerly and compared with the reference (a wrong result excludes the tactic and fails the
sweep), then timed in a CUDA graph whose replay rotates through enough weight copies to read several
times the L2 (`rotation`). Every measurement is appended to sweep.jsonl as it is made, so an aborted
sweep keeps what it measured; sweep.json summarizes and moe-tactics.json is the table.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.serving.moe import table as tables
from sparkserve.serving.moe import tactics as tmod
from sparkserve_lab.moe import compare, weights
from sparkserve_lab.moe.backend import Backend

JSONL = "sweep.jsonl"
SUMMARY = "sweep.json"


@dataclass(frozen=True)
class Config:
    buckets: tuple[int, ...]
    seed: int = 0
    replays: int = 20
    warmup: int = 3
    repeats: int = 3
    tolerance: float | None = None  # None: compare.TOLERANCE for the path's activation
    every_index: bool = False  # also the indices FlashInfer's own filters drop (they raise or are wrong)

    def replays_for(self, tokens: int) -> int:
        """Fewer replays where one call takes milliseconds."""
        return self.replays if tokens < 2048 else max(3, self.replays // 4)


@dataclass
class Measurement:
    tokens: int
    stage: str  # default, gemm1, gemm2
    profile_ids: list[int]
    labels: list[str]
    agreement: dict[str, Any] | None = None
    ok: bool = False
    error: str | None = None
    time_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "stage": self.stage, "profile_ids": self.profile_ids,
                "labels": self.labels, "ok": self.ok, "error": self.error, "time_us": self.time_us,
                "agreement": self.agreement}


@dataclass
class BucketResult:
    tokens: int
    rotation: dict[str, Any]
    default: Measurement
    chosen: Measurement | None
    measurements: list[Measurement] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        ms = self.measurements
        return {"measured": len(ms), "correct": sum(m.ok for m in ms),
                "wrong": sum(m.agreement is not None and not m.ok and m.error is None for m in ms),
                "errors": sum(m.error is not None for m in ms)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Sweep:
    def __init__(self, backend: Backend, cfg: Config, out_dir: Path,
                 say: Callable[[str], None] = print) -> None:
        self.b, self.cfg, self.out, self.say = backend, cfg, out_dir, say
        self.tol = cfg.tolerance if cfg.tolerance is not None else compare.TOLERANCE[backend.activation]
        self.jsonl = out_dir / JSONL

    def _labels(self, ids: list[int], listing: tmod.TacticList | None) -> list[str]:
        if listing is None:
            return ["?", "?"]
        return [listing.get(ids[0], 1).label(), listing.get(ids[1], 2).label()]

    def measure(self, tokens: int, stage: str, ids: list[int], listing: tmod.TacticList | None,
                rot: Any, ref: Any) -> Measurement:
        m = Measurement(tokens, stage, ids, self._labels(ids, listing))
        try:
            out = self.b.run(ids)
        except Exception as exc:  # FlashInfer raises its own (TVM FFI) error types for unsupported configs
            m.error = f"run: {_first_line(exc)}"
        else:
            a = compare.agree(out, ref)
            m.agreement, m.ok = a.to_dict(), a.ok(self.tol)
            if m.ok:
                try:
                    m.time_us = self.b.time_us(ids, rot, self.cfg.replays_for(tokens), self.cfg.warmup,
                                               self.cfg.repeats)
                except Exception as exc:
                    m.ok, m.error = False, f"timing: {_first_line(exc)}"
        with self.jsonl.open("a") as f:
            f.write(json.dumps(m.to_dict()) + "\n")
        verdict = (f"{m.time_us:9.2f} us" if m.time_us is not None else
                   "  ERROR     " if m.error else "  WRONG     ")
        detail = m.error or (f"rel L2 {m.agreement['rel_l2']:.1e}" if m.agreement else "")
        self.say(f"  {tokens:>5} {stage:<7} [{ids[0]:>4},{ids[1]:>4}] {verdict}  {' | '.join(m.labels)}  "
                 f"{detail}")
        return m

    def bucket(self, tokens: int, space: Any) -> BucketResult:
        s = self.b.shape
        seed = self.cfg.seed * 1_000_003 + tokens
        x = weights.random_input(tokens, s, seed=seed)
        ids, w = weights.random_routing(tokens, s.experts, s.top_k, seed=seed + 1)
        self.b.bucket(x, ids, w)
        ref = self.b.reference()
        rot = self.b.rotation(tokens)
        self.say(f"bucket {tokens} tokens: {rot.note()}")
        listing = space.listing
        default = self.measure(tokens, "default", [-1, -1], listing, rot, ref)
        res = BucketResult(tokens, rot.to_dict(), default, None, [default])
        partner2 = -1
        if default.error:  # find a GEMM2 tactic that runs with the default GEMM1 one
            for g2 in space.gemm2:
                try:
                    self.b.run([-1, g2])
                except Exception:
                    continue
                partner2 = g2
                break
        g1s = [self.measure(tokens, "gemm1", [g1, partner2], listing, rot, ref) for g1 in space.gemm1]
        res.measurements += g1s
        ok1 = [m for m in g1s if m.ok and m.time_us is not None]
        best1 = min(ok1, key=lambda m: m.time_us or 0.0).profile_ids[0] if ok1 else -1
        g2s = [self.measure(tokens, "gemm2", [best1, g2], listing, rot, ref) for g2 in space.gemm2]
        res.measurements += g2s
        ok2 = [m for m in g2s if m.ok and m.time_us is not None]
        res.chosen = min(ok2, key=lambda m: m.time_us or 0.0) if ok2 else None
        return res

    def run(self) -> tuple[list[BucketResult], Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        self.jsonl.write_text("")
        results: list[BucketResult] = []
        space = None
        for tokens in self.cfg.buckets:
            if space is None:
                s = self.b.shape
                x = weights.random_input(tokens, s, seed=self.cfg.seed)
                ids, w = weights.random_routing(tokens, s.experts, s.top_k, seed=self.cfg.seed + 1)
                self.b.bucket(x, ids, w)
                space = self.b.space()
                if self.cfg.every_index:
                    n1, n2 = space.counts
                    space = dataclasses.replace(space, gemm1=list(range(n1)), gemm2=list(range(n1, n1 + n2)))
                known = space.listing.variant if space.listing else "UNKNOWN to sparkserve (labels are '?')"
                self.say(f"tactics: {space.counts[0]} GEMM1 + {space.counts[1]} GEMM2 ({known}); "
                         f"FlashInfer's autotuner would try {len(space.gemm1)} + {len(space.gemm2)} of them")
            t0 = time.monotonic()
            results.append(self.bucket(tokens, space))
            self.say(f"bucket {tokens}: {time.monotonic() - t0:.0f} s, {results[-1].counts()}")
        return results, space


def concrete(ids: list[int], counts: tuple[int, int]) -> tuple[int, int]:
    """-1 (FlashInfer's default) as the index it stands for."""
    return (0 if ids[0] == -1 else ids[0]), (counts[0] if ids[1] == -1 else ids[1])


def make_table(results: list[BucketResult], space: Any, b: Backend, build: tables.Build,
               measurement: dict[str, Any], source: dict[str, Any]) -> tables.Table:
    entries = []
    for r in results:
        if r.chosen is None:
            continue
        g1, g2 = concrete(r.chosen.profile_ids, space.counts)
        labels = r.chosen.labels
        entries.append(tables.Entry(r.tokens, g1, g2, labels[0], labels[1], r.chosen.time_us,
                                    r.default.time_us))
    return tables.Table(build, b.shape, tuple(entries), b.device.name, measurement=measurement, source=source)


def verdict(results: list[BucketResult]) -> tuple[bool, list[str]]:
    problems = []
    for r in results:
        c = r.counts()
        if c["wrong"]:
            wrong = [m for m in r.measurements if m.agreement is not None and not m.ok and m.error is None]
            problems.append(f"{r.tokens} tokens: {c['wrong']} tactic(s) disagree with the reference, e.g. "
                            f"{wrong[0].profile_ids} {' | '.join(wrong[0].labels)}: "
                            f"rel L2 {(wrong[0].agreement or {}).get('rel_l2', 0):.2e}")
        if r.chosen is None:
            problems.append(f"{r.tokens} tokens: no tactic pair ran correctly")
        if r.default.error:
            problems.append(f"{r.tokens} tokens: FlashInfer's default tactics fail: {r.default.error}")
    return not problems, problems


def summary(results: list[BucketResult], space: Any, b: Backend, cfg: Config, tol: float,
            ok: bool, problems: list[str]) -> dict[str, Any]:
    def brief(m: Measurement | None) -> dict[str, Any] | None:
        return None if m is None else {"profile_ids": m.profile_ids, "labels": m.labels, "time_us": m.time_us,
                                       "rel_l2": (m.agreement or {}).get("rel_l2"), "error": m.error}

    return {
        "verdict": "pass" if ok else "fail", "problems": problems,
        "path": b.path, "path_description": tmod.PATHS[b.path], "device": b.device.to_dict(),
        "shape": b.shape.to_dict(), "activation": b.activation, "tolerance_rel_l2": tol,
        "timings": "synthetic (CPU dry run cost model, not measurements)" if b.device.simulated else
                   "CUDA graphs, median of batches, microseconds per fused-MoE call",
        "config": {"buckets": list(cfg.buckets), "seed": cfg.seed, "replays": cfg.replays,
                   "warmup": cfg.warmup, "repeats": cfg.repeats},
        "tactics": {"counts": list(space.counts), "tried_gemm1": len(space.gemm1),
                    "tried_gemm2": len(space.gemm2),
                    "variant": space.listing.variant if space.listing else None},
        "buckets": [{"tokens": r.tokens, "rotation": r.rotation, "counts": r.counts(),
                     "default": brief(r.default), "chosen": brief(r.chosen),
                     "speedup_vs_default": (r.default.time_us / r.chosen.time_us
                                            if r.chosen and r.chosen.time_us and r.default.time_us else None)}
                    for r in results],
    }
