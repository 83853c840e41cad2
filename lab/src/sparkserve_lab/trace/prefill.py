"""What a prefill chunk costs: the steps of a trace that compute prompt tokens, at the step size the
scheduler fills (MAX_NUM_BATCHED_TOKENS when prompts queue), per kernel class and per token.

Under load a prefill chunk shares its step with the decode tokens of running requests; the chunk's size
is the step's prompt plus decode tokens. The full chunks are the steps with the most tokens the trace
shows (the budget); smaller ones (a prompt's last piece) are counted but not averaged."""

from __future__ import annotations

import statistics
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab.trace.classify import CLASSES
from sparkserve_lab.trace.steps import Step, kernel_rows


def tokens(s: Step) -> int:
    return s.ctx_tokens + s.gen_tokens


def full_chunks(steps: list[Step]) -> list[Step]:
    """The prefill steps with a known period at the largest token count of the trace."""
    pre = [s for s in steps if s.ctx_reqs > 0 and s.period_us is not None]
    if not pre:
        seen = sorted({(s.ctx_reqs, s.gen_reqs) for s in steps})
        raise SparkserveError(f"no prefill step in the trace (steps seen as (context, generation) requests: "
                              f"{seen[:12]}): were the requests sent while the profile ran?")
    size = max(tokens(s) for s in pre)
    return [s for s in pre if tokens(s) == size]


def summarize(steps: list[Step], concurrency: int) -> dict[str, Any]:
    """Means per class over the full chunks, the same per token, and medians of the step's totals."""
    chosen = full_chunks(steps)
    size = tokens(chosen[0])
    period = statistics.median(s.period_us or 0.0 for s in chosen)
    per_class = {c: statistics.fmean(s.class_us()[c] for s in chosen) for c in CLASSES}
    return {
        "concurrency": concurrency,
        "prefill_steps": sum(1 for s in steps if s.ctx_reqs > 0),
        "full_chunks": len(chosen),
        "chunk_tokens": size,
        "chunk_decode_tokens": round(statistics.fmean(s.gen_tokens for s in chosen), 2),
        "step_period_us": round(period, 2),
        "tokens_per_s_from_period": round(size * 1e6 / period, 1) if period else None,
        "gpu_kernel_time_us": round(statistics.fmean(sum(e.dur for e in s.events) for s in chosen), 2),
        "gpu_busy_us": round(statistics.fmean(s.busy_us() for s in chosen), 2),
        "host_execute_model_us": round(statistics.median(s.annotation.dur for s in chosen), 2),
        "kernels_per_step": round(statistics.fmean(len(s.events) for s in chosen), 2),
        "class_us": {c: round(v, 2) for c, v in per_class.items()},
        "class_ns_per_token": {c: round(v * 1000 / size, 2) for c, v in per_class.items()},
    }


def median_chunk(steps: list[Step]) -> Step:
    """The full chunk of median period (the summarized trace)."""
    chosen = sorted(full_chunks(steps), key=lambda s: s.period_us or 0.0)
    return chosen[len(chosen) // 2]


def kernel_table(steps: list[Step]) -> list[dict[str, Any]]:
    """Every kernel name of the full chunks: its class, launches and mean time per chunk."""
    return kernel_rows(full_chunks(steps), "chunk")
