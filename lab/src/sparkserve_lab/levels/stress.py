"""Level 3, stress: N sequential requests, M requests at concurrency C, one long-context request; zero
errors and no server restart (same process alive, no new "Starting vLLM server" or fatal engine line).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparkserve.gate.common import Client, HttpError, LevelResult
from sparkserve.progress import say
from sparkserve_lab.validate.logparse import parse_file

PROMPTS = [
    "Write one sentence about the sea.",
    "List three colours.",
    "Explain what a kernel is in computing, briefly.",
    "Count from one to five.",
]


def _one(client: Client, model: str, i: int, max_tokens: int) -> tuple[bool, str, float]:
    t = time.monotonic()
    try:
        r = client.chat(
            model,
            [{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + f" (#{i})"}],
            max_tokens=max_tokens,
            temperature=0.7,
            seed=i,
        )
        toks = int((r.get("usage") or {}).get("completion_tokens") or 0)
        if toks <= 0:
            return False, f"request {i}: no completion tokens", time.monotonic() - t
        return True, "", time.monotonic() - t
    except (HttpError, KeyError, IndexError, ValueError) as exc:
        return False, f"request {i}: {exc}", time.monotonic() - t


def _long_prompt(client: Client, model: str, target_tokens: int) -> tuple[str, int | None]:
    """A prompt of about `target_tokens` tokens, sized with the server's /tokenize when it has one."""
    from sparkserve_lab.bench.book import corpus

    text = corpus(max(target_tokens, 64), seed=7)
    words = text.split(" ")
    try:
        n = int(client.post("/tokenize", {"model": model, "prompt": text})["count"])
        keep = max(1, int(len(words) * target_tokens / n * 0.97))
        text = " ".join(words[:keep])
        return text, int(client.post("/tokenize", {"model": model, "prompt": text})["count"])
    except (HttpError, KeyError, TypeError, ValueError):
        return " ".join(words[: int(target_tokens * 0.7)]), None


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def run(
    client: Client,
    model: str | None = None,
    sequential: int = 100,
    concurrent_requests: int = 40,
    concurrency: int = 4,
    long_tokens: int = 4096,
    max_tokens: int = 16,
    server_pid: int | None = None,
    engine_log: Path | None = None,
) -> LevelResult:
    res = LevelResult("3", "stress")
    start = time.monotonic()
    model = model or client.model_id()
    before = parse_file(engine_log) if engine_log else None

    errors: list[str] = []
    lat: list[float] = []
    for i in range(sequential):
        ok, err, dt = _one(client, model, i, max_tokens)
        lat.append(dt)
        if not ok:
            errors.append(err)
        if (i + 1) % 25 == 0:
            say(f"  stress: {i + 1}/{sequential} sequential, {len(errors)} error(s)")
    res.metrics["sequential"] = {
        "n": sequential,
        "errors": len(errors),
        "mean_latency_s": round(sum(lat) / max(1, len(lat)), 3),
    }
    res.add(
        f"{sequential} sequential requests",
        not errors and sequential > 0,
        f"{len(errors)} error(s)" + (f"; first: {errors[0]}" if errors else ""),
    )

    cerr: list[str] = []
    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        outs = list(pool.map(lambda i: _one(client, model, 1000 + i, max_tokens), range(concurrent_requests)))
    cerr = [e for ok, e, _ in outs if not ok]
    res.metrics["concurrent"] = {
        "n": concurrent_requests,
        "concurrency": concurrency,
        "errors": len(cerr),
        "wall_s": round(time.monotonic() - t, 2),
    }
    res.add(
        f"{concurrent_requests} requests at concurrency {concurrency}",
        not cerr and concurrent_requests > 0,
        f"{len(cerr)} error(s)" + (f"; first: {cerr[0]}" if cerr else ""),
    )

    prompt, measured = _long_prompt(client, model, long_tokens)
    t = time.monotonic()
    info: dict[str, Any] = {"target_tokens": long_tokens, "measured_tokens": measured}
    try:
        r = client.chat(model, [{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0)
        used = int((r.get("usage") or {}).get("prompt_tokens") or 0)
        info.update(prompt_tokens=used, wall_s=round(time.monotonic() - t, 2))
        res.add(
            "one long-context request",
            used >= 0.8 * long_tokens,
            f"{used} prompt tokens (target {long_tokens}) in {info['wall_s']}s",
        )
    except (HttpError, KeyError, IndexError) as exc:
        res.add("one long-context request", False, str(exc))
    res.metrics["long_context"] = info

    try:
        client.models()
        res.add("server still answers", True)
    except HttpError as exc:
        res.add("server still answers", False, str(exc))
    if server_pid:
        res.add("server process still alive (no restart)", _alive(server_pid), f"pid {server_pid}")
    else:
        res.add("server process still alive (no restart)", None, "skipped: no --server-pid")
    if engine_log and before is not None:
        after = parse_file(engine_log)
        new_starts = after.server_starts - before.server_starts
        new_fatal = after.fatal_errors[len(before.fatal_errors) :]
        res.add(
            "no restart or fatal error in the engine log",
            new_starts == 0 and not new_fatal,
            f"{new_starts} new server start(s), {len(new_fatal)} new fatal line(s)"
            + (f": {new_fatal[0][:200]}" if new_fatal else ""),
        )
    else:
        res.add("no restart or fatal error in the engine log", None, "skipped: no --engine-log")
    res.wall_s = time.monotonic() - start
    return res
