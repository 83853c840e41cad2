"""Profile a running vLLM server's decode steps as it serves: vLLM's /start_profile and /stop_profile
(the server started with `--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR, ...}'`),
around `batch` concurrent requests that decode a fixed number of tokens each."""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.gate.common import Client, HttpError
from sparkserve.progress import say
from sparkserve_lab.trace.steps import Step

TRACE_GLOBS = ("*.pt.trace.json.gz", "*.pt.trace.json")


def require_ready(client: Client) -> str:
    """The served model; refused with the reason when the server is not ready to serve."""
    try:
        client.get("/health", timeout=10)
    except HttpError as exc:
        raise SparkserveError(f"server not ready: GET {client.root}/health: {exc}") from None
    try:
        models = client.models()
    except (HttpError, KeyError, TypeError) as exc:
        raise SparkserveError(f"server not ready: GET {client.root}/v1/models: {exc}") from None
    if not models:
        raise SparkserveError(f"server not ready: {client.root}/v1/models lists no model")
    return str(models[0]["id"])


def require_graphs(decode: list[Step], expect_graphs: bool) -> None:
    """CUDA graphs on means the decode steps' model forward is a graph replay: refuse a capture whose
    decode steps launched no graph when graphs are expected (and the reverse)."""
    if not decode:
        return
    with_graphs = sum(1 for s in decode if s.graph_launches > 0)
    if expect_graphs and with_graphs == 0:
        eager = sum(s.kernel_launches for s in decode) / len(decode)
        raise SparkserveError(
            f"CUDA graphs are off in this server ({len(decode)} decode steps, none replayed a graph; "
            f"{eager:.0f} eager kernel launches per step) but the profile says they are on: a breakdown "
            "of eager steps is not the step as served")
    if not expect_graphs and with_graphs:
        raise SparkserveError(f"{with_graphs} of {len(decode)} decode steps replayed a CUDA graph, but "
                              "--cuda-graphs off was given")


# Each request its own prompt and sampling seed: identical greedy requests decode identical tokens, which
# all pick the same experts, and a batch of them reads a fraction of the MoE weights a real batch reads.
PROMPTS = ("Say something about the sea.", "List three uses of copper.", "Why do cats purr?",
           "Describe a quiet morning.", "What is a prime number?", "Name a river in Asia.")
TEMPERATURE = 1.0


@dataclass(frozen=True)
class Load:
    batch: int
    tokens: int

    def body(self, model: str, i: int) -> dict[str, object]:
        return {"model": model, "prompt": f"Request {i}. {PROMPTS[i % len(PROMPTS)]}",
                "max_tokens": self.tokens,
                "min_tokens": self.tokens, "temperature": TEMPERATURE, "seed": i, "ignore_eos": True,
                "stream": False}

    def to_dict(self) -> dict[str, object]:
        return {"tokens": self.tokens, "prompts": "a distinct prompt per request",
                "temperature": TEMPERATURE, "seed": "the request's index", "ignore_eos": True}


# Token ids of the prompts a prefill capture sends: inside gpt-oss's o200k vocabulary, clear of its special
# tokens (ids from 199998 on).
FIRST_ID, ID_SPAN = 1000, 149_000


@dataclass(frozen=True)
class PromptLoad(Load):
    """`batch` requests of `prompt_tokens` token ids each, then `tokens` decoded: every request's ids differ
    from its first block on, and from another capture's (`salt`), so prefix caching reuses nothing and
    each prompt is prefilled whole."""
    prompt_tokens: int = 2048
    salt: int = 0

    def body(self, model: str, i: int) -> dict[str, object]:
        import random

        rng = random.Random(f"{self.salt}/{i}")  # the same prompt for the same capture and request
        ids = [FIRST_ID + rng.randrange(ID_SPAN) for _ in range(self.prompt_tokens)]
        return {**super().body(model, i), "prompt": ids}

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "prompt_tokens": self.prompt_tokens,
                "prompts": "token ids distinct per request and capture (no prefix-cache hit)"}


def _one(client: Client, body: dict[str, object]) -> int:
    out = client.post("/v1/completions", body, timeout=600)
    return int(((out or {}).get("usage") or {}).get("completion_tokens") or 0)


def send(client: Client, model: str, load: Load) -> list[int]:
    """`batch` requests at once; the completion tokens of each."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=load.batch) as pool:
        futs = [pool.submit(_one, client, load.body(model, i)) for i in range(load.batch)]
        return [f.result() for f in futs]


def _traces(trace_dir: Path) -> dict[Path, float]:
    found: dict[Path, float] = {}
    for g in TRACE_GLOBS:
        for p in trace_dir.rglob(g):
            found[p] = p.stat().st_mtime
    return found


def profile_once(client: Client, model: str, load: Load, trace_dir: Path, wait_s: float = 300) -> Path:
    """One /start_profile .. requests .. /stop_profile; the worker's trace file it wrote."""
    before = _traces(trace_dir)
    try:
        client.post("/start_profile", {}, timeout=120)
    except HttpError as exc:
        hint = (" (the server was started without --profiler-config: vLLM serves /start_profile only "
                "with a profiler)") if exc.status == 404 else ""
        raise SparkserveError(f"POST /start_profile: {exc}{hint}") from None
    try:
        got = send(client, model, load)
    finally:
        client.post("/stop_profile", {}, timeout=wait_s)
    short = [n for n in got if n < load.tokens]
    if short:
        raise SparkserveError(f"{len(short)} of {load.batch} requests decoded fewer than {load.tokens} "
                              f"tokens ({sorted(set(short))[:5]}): the steps would not all be at batch "
                              f"{load.batch}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        new = {p: t for p, t in _traces(trace_dir).items() if before.get(p) != t}
        # the worker's trace holds the GPU; the front end's (when not ignored) is the smaller one
        if new:
            newest = max(new, key=lambda p: p.stat().st_size)
            size = newest.stat().st_size
            time.sleep(2)
            if newest.stat().st_size == size and size > 0:
                say(f"  trace {newest} ({size / 1e6:.1f} MB)")
                return newest
        time.sleep(1)
    raise SparkserveError(f"no new torch profiler trace under {trace_dir} within {wait_s:.0f}s of "
                          "/stop_profile (is it the server's torch_profiler_dir?)")
