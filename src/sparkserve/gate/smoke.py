"""Level 1, smoke: the server is up, lists its model, answers one chat completion, and (for harmony
models, i.e. gpt-oss) returns the reasoning channel separately.

The harmony check depends on the configuration: `--harmony auto` requires reasoning for gpt-oss
(model_type gpt_oss) and skips it, with the reason recorded, for other models such as the tiny random
Llama used in CI, which has no harmony format at all. `required` / `skip` force either way.

Random weights (`--random-weights`, the matrix's `random_weights: true`, e.g. gpt-oss-120b served with
`--load-format dummy`): the model emits arbitrary token ids, never a harmony channel, so the harmony
check is reported as not applicable (ok = None, with that reason), never as a pass; the chat completion
itself is still required.
"""

from __future__ import annotations

import time

from sparkserve.gate.common import Client, HttpError, LevelResult, message_text, resolve_harmony

NOT_APPLICABLE_RANDOM = (
    "not applicable (random weights): a random-weight model never emits harmony channels, so reasoning "
    "cannot be checked; this needs a real checkpoint"
)


def run(
    client: Client,
    model: str | None = None,
    harmony: str = "auto",
    max_tokens: int = 64,
    random_weights: bool = False,
) -> LevelResult:
    res = LevelResult("1", "smoke")
    start = time.monotonic()
    try:
        health = client.get("/health", timeout=30)
        res.add("GET /health", True, "200" + (f" {health}" if health else ""))
    except HttpError as exc:
        # vLLM always serves /health: a 5xx, a 404 or a refused connection is a server that is not up.
        res.add("GET /health", False, f"{exc}")
    try:
        models = client.models()
        ids = [m["id"] for m in models]
        model = model or (ids[0] if ids else None)
        res.add("GET /v1/models", bool(ids) and model in ids, f"models: {', '.join(ids) or '-'}")
    except HttpError as exc:
        res.add("GET /v1/models", False, str(exc))
        res.wall_s = time.monotonic() - start
        return res
    assert model is not None
    res.metrics["model"] = model
    resp = None
    try:
        resp = client.chat(
            model,
            [{"role": "user", "content": "What is 2 + 2? Answer in one sentence."}],
            max_tokens=max_tokens,
            temperature=0,
        )
        content, reasoning = message_text(resp)
        toks = int((resp.get("usage") or {}).get("completion_tokens") or 0)
        res.metrics.update(completion_tokens=toks, content=content[:200], reasoning=reasoning[:200])
        res.add(
            "one chat completion",
            toks > 0 and bool(content or reasoning),
            f"{toks} tokens, finish_reason={resp['choices'][0].get('finish_reason')}",
        )
    except (HttpError, KeyError, IndexError) as exc:
        res.add("one chat completion", False, str(exc))
    want, why = resolve_harmony(client, harmony, model)
    res.metrics["random_weights"] = random_weights
    if random_weights:
        res.add("harmony reasoning present", None, f"{NOT_APPLICABLE_RANDOM} ({why})")
    elif want == "skip":
        res.add("harmony reasoning present", None, f"skipped: not a harmony (gpt-oss) model ({why})")
    elif resp is None:
        res.add("harmony reasoning present", False, "no chat response to inspect")
    else:
        _, reasoning = message_text(resp)
        res.add(
            "harmony reasoning present",
            bool(reasoning.strip()),
            f"reasoning: {len(reasoning)} chars ({why}); the server needs --reasoning-parser openai_gptoss",
        )
    res.wall_s = time.monotonic() - start
    return res
