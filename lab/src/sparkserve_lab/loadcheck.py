"""Weight loaders compared on one checkpoint: the same weights and the same outputs, and how long each
takes to load.

`sparkserve validate loader DIR` starts one vLLM engine per load format and round, each in a fresh
process, interleaved (A B A B ...). Each child loads the checkpoint eagerly (no compile, no graphs: the
load is what is compared), takes vLLM's own sha256 of every parameter after loading and post-processing,
generates greedily from fixed token ids, and reports the engine's "Loading weights took" time. The
parent requires identical digests and identical tokens from every child. Before each load it drops the
page cache when it may (root on a host), so no loader reads files the previous one left in memory; the
record says whether it could.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.progress import say

KIND = "load-check"
LOAD_LINE = re.compile(r"Loading weights took ([0-9.]+) seconds")
# Fixed prompts as token ids (below 2048: inside any vocabulary): no tokenizer decides what is compared.
PROMPTS = ([1428, 12, 1941, 11, 1495, 382, 220, 17, 659, 220, 17, 30], list(range(1000, 1064)))
MAX_TOKENS = 24
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


@dataclass
class Load:
    load_format: str
    round: int
    weights_s: float | None
    engine_s: float
    page_cache_dropped: bool
    digests: dict[str, str]
    tokens: list[list[int]]

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.digests):
            h.update(f"{name}={self.digests[name]}\n".encode())
        return h.hexdigest()


@dataclass
class Verdict:
    ok: bool
    problems: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def compare(loads: list[Load]) -> Verdict:
    """Every load must give the first one's parameters and tokens; medians of the load times per format."""
    if len({x.load_format for x in loads}) < 2:
        return Verdict(False, ["fewer than two load formats: nothing compared"])
    ref = loads[0]
    problems: list[str] = []
    for x in loads[1:]:
        tag = f"{x.load_format} round {x.round}"
        if set(x.digests) != set(ref.digests):
            diff = sorted(set(x.digests) ^ set(ref.digests))
            problems.append(f"{tag}: other parameters than {ref.load_format}: {', '.join(diff[:5])}")
        else:
            bad = sorted(n for n in x.digests if x.digests[n] != ref.digests[n])
            if bad:
                problems.append(f"{tag}: {len(bad)} parameter(s) differ from {ref.load_format}'s, e.g. "
                                f"{', '.join(bad[:5])}")
        if x.tokens != ref.tokens:
            problems.append(f"{tag}: generated other tokens than {ref.load_format} round {ref.round}")
    summary: dict[str, Any] = {}
    for fmt in dict.fromkeys(x.load_format for x in loads):
        times = [x.weights_s for x in loads if x.load_format == fmt and x.weights_s is not None]
        summary[fmt] = {
            "weights_s": times,
            "weights_s_median": round(statistics.median(times), 2) if times else None,
            "engine_s": [round(x.engine_s, 1) for x in loads if x.load_format == fmt],
        }
        if not times:
            problems.append(f"{fmt}: no 'Loading weights took' line in any of its engine logs")
    summary["parameters"] = len(ref.digests)
    summary["digest"] = ref.digest()
    summary["page_cache_dropped"] = all(x.page_cache_dropped for x in loads)
    return Verdict(not problems, problems, summary)


def load_seconds(log: str) -> float | None:
    """vLLM's own weight-loading time from an engine log (the last such line)."""
    found = LOAD_LINE.findall(log)
    return float(found[-1]) if found else None


def drop_page_cache() -> bool:
    try:
        os.sync()
        DROP_CACHES.write_text("3\n")
        return True
    except OSError:
        return False


def child(model: str, load_format: str, max_model_len: int, out: Path) -> None:
    """One engine, one loader (runs in its own process: `python -m sparkserve_lab.loadcheck`)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the model in this process, for apply_model
    from vllm import LLM, SamplingParams
    from vllm.model_executor.model_loader.weight_checksum import compute_tensor_digests

    t0 = time.monotonic()
    llm = LLM(model=model, load_format=load_format, enforce_eager=True, max_model_len=max_model_len,
              gpu_memory_utilization=0.85, seed=0)
    engine_s = time.monotonic() - t0
    digests = llm.apply_model(compute_tensor_digests)[0]
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": list(p)} for p in PROMPTS], params, use_tqdm=False)
    out.write_text(json.dumps({
        "load_format": load_format, "engine_s": engine_s,
        "digests": digests, "tokens": [list(o.outputs[0].token_ids) for o in outs],
    }))


def check_args(model: Path, formats: list[str], rounds: int) -> None:
    if not (model / "config.json").is_file() or not list(model.glob("*.safetensors")):
        raise SparkserveError(
            f"{model}: not a checkpoint with safetensors files (write one with "
            "`python -m sparkserve_lab.testing gptoss-dummy --size 20b --random-weights-seed 0`)")
    if len(set(formats)) < 2 or len(set(formats)) != len(formats):
        raise SparkserveError(f"--formats {','.join(formats)}: name two or more different load formats")
    if rounds < 1:
        raise SparkserveError("--rounds must be at least 1")


def run(model: Path, formats: list[str], rounds: int, work: Path, max_model_len: int = 4096,
        python: str = sys.executable) -> list[Load]:
    check_args(model, formats, rounds)
    work.mkdir(parents=True, exist_ok=True)
    loads: list[Load] = []
    for r in range(1, rounds + 1):
        for fmt in formats:
            dropped = drop_page_cache()
            out = work / f"{fmt}-{r}.json"
            log = work / f"{fmt}-{r}.log"
            say(f"load check: round {r}/{rounds}, {fmt} (page cache {'dropped' if dropped else 'kept'}); "
                f"log {log}")
            cmd = [python, "-m", "sparkserve_lab.loadcheck", str(model), fmt, str(max_model_len),
                   str(out)]
            with log.open("w") as fh:
                rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
            if rc != 0 or not out.is_file():
                tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
                raise SparkserveError(
                    f"{fmt} round {r}: the engine failed (exit {rc}); last lines of {log}:\n{tail}")
            d = json.loads(out.read_text())
            weights_s = load_seconds(log.read_text(errors="replace"))
            loads.append(Load(fmt, r, weights_s, d["engine_s"], dropped, d["digests"], d["tokens"]))
            say(f"load check: {fmt} round {r}: weights {weights_s} s, engine {d['engine_s']:.1f} s")
    return loads


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
