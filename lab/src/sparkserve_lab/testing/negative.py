"""Inputs made wrong on purpose, for the negative controls of the levels: a check that cannot fail
proves nothing, so CI feeds each one an input it must reject."""

from __future__ import annotations

import json
from pathlib import Path

from sparkserve.errors import SparkserveError


def diverge_reference(src: Path, dst: Path, after: int) -> int:
    """A level-2 reference whose token ids differ from `src` after the first `after` tokens of every
    prompt; returns the number of prompts changed."""
    data = json.loads(src.read_text())
    prompts = data.get("prompts") or []
    if not prompts:
        raise SparkserveError(f"{src}: no prompts in the reference")
    for p in prompts:
        ids = p["token_ids"]
        p["token_ids"] = ids[:after] + [(t + 1) % 1000 for t in ids[after:]]
    data["configuration"] = f"{data.get('configuration', '?')}, tampered after {after} tokens"
    dst.write_text(json.dumps(data))
    return len(prompts)


def scale_throughput(bench_json: Path, factor: float) -> int:
    """Multiply every prefill/decode throughput of a stored llama-benchy result by `factor` (in place);
    returns the number of benchmarks changed."""
    data = json.loads(bench_json.read_text())
    changed = 0
    for b in data.get("benchmarks") or []:
        for key in ("pp_throughput", "tg_throughput", "tg_req_throughput"):
            if b.get(key):
                b[key]["mean"] *= factor
                b[key]["values"] = [v * factor for v in b[key]["values"]]
                changed += 1
    if not changed:
        raise SparkserveError(f"{bench_json}: no throughput to scale")
    bench_json.write_text(json.dumps(data))
    return changed
