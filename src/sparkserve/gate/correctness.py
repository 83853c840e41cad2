"""Level 2, correctness.

1. Temperature-0 token comparison against a reference configuration: `--record FILE` stores the token
   ids the reference configuration produces for a fixed prompt set (/v1/completions with
   `return_tokens_as_token_ids`); a later run with `--reference FILE` compares. Different kernels
   round differently, so greedy sequences may diverge after a while: every prompt must agree on its
   first `min_prefix` tokens and the mean agreeing fraction must reach `min_mean_fraction`.
2. Harmony / tool-call parse (gpt-oss only; skipped with the reason for other models): a chat request
   with one tool must come back as well-formed JSON with reasoning separated; every returned tool call
   must carry a function name and JSON arguments. With `--real-checkpoint` the call must be made.
3. A fixed arithmetic set with exact answers, for real checkpoints only (random weights cannot answer).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.gate.common import Client, HttpError, LevelResult, message_text, resolve_harmony

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics are",
    "SELECT name FROM users WHERE",
    "1, 1, 2, 3, 5, 8,",
    "In 1969, the first humans",
    "A haiku about the winter moon:\n",
]

ARITHMETIC = [
    ("What is 17 * 23?", 391),
    ("What is 1234 + 4321?", 5555),
    ("What is 1000 - 357?", 643),
    ("What is 144 / 12?", 12),
    ("What is 2 to the power of 10?", 1024),
    ("What is 99 * 99?", 9801),
    ("What is the sum of the integers from 1 to 100?", 5050),
    ("What is 7 factorial?", 5040),
    ("What is 15% of 240?", 36),
    ("What is 81 divided by 9, plus 6?", 15),
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def greedy_tokens(client: Client, model: str, max_tokens: int) -> list[dict[str, Any]]:
    out = []
    for p in PROMPTS:
        r = client.completion(
            model,
            p,
            max_tokens=max_tokens,
            temperature=0,
            logprobs=1,
            return_tokens_as_token_ids=True,
            seed=0,
        )
        toks = r["choices"][0]["logprobs"]["tokens"]
        ids = [int(str(t).split(":", 1)[1]) for t in toks]
        out.append({"prompt": p, "token_ids": ids})
    return out


def compare(
    reference: list[dict[str, Any]], got: list[dict[str, Any]], min_prefix: int, min_mean_fraction: float
) -> tuple[bool, str, list[int]]:
    """(ok, detail, agreeing prefix length per prompt). Pure, so unit tests can drive it."""
    if [r["prompt"] for r in reference] != [g["prompt"] for g in got]:
        return False, "the prompt sets differ", []
    prefixes, fractions = [], []
    for r, g in zip(reference, got, strict=True):
        a, b = r["token_ids"], g["token_ids"]
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        prefixes.append(n)
        fractions.append(n / max(1, len(a)))
    need = [min(min_prefix, len(r["token_ids"])) for r in reference]
    short = [i for i, (p, k) in enumerate(zip(prefixes, need, strict=True)) if p < k]
    mean = sum(fractions) / max(1, len(fractions))
    ok = not short and mean >= min_mean_fraction
    detail = (
        f"agreeing prefix per prompt {prefixes}; mean fraction {mean:.2f} (need {min_mean_fraction}); "
        f"prompts under {min_prefix} tokens: {short or 'none'}"
    )
    return ok, detail, prefixes


def last_integer(text: str) -> int | None:
    nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    if not nums:
        return None
    v = nums[-1].replace(",", "")
    try:
        f = float(v)
    except ValueError:
        return None
    return int(f) if f.is_integer() else None


def run(
    client: Client,
    model: str | None = None,
    reference: Path | None = None,
    record: Path | None = None,
    configuration: str = "unknown",
    max_tokens: int = 32,
    min_prefix: int = 8,
    min_mean_fraction: float = 0.5,
    harmony: str = "auto",
    real_checkpoint: bool = False,
) -> LevelResult:
    res = LevelResult("2", "correctness")
    start = time.monotonic()
    model = model or client.model_id()

    try:
        got = greedy_tokens(client, model, max_tokens)
        if record:
            record.write_text(
                json.dumps(
                    {
                        "configuration": configuration,
                        "model": model,
                        "max_tokens": max_tokens,
                        "prompts": got,
                    },
                    indent=1,
                )
                + "\n"
            )
            res.add("recorded reference tokens", True, f"{record} ({configuration})")
        if reference:
            ref = json.loads(reference.read_text())
            ok, detail, _ = compare(ref["prompts"], got, min_prefix, min_mean_fraction)
            res.add(f"temperature-0 tokens match reference ({ref.get('configuration')})", ok, detail)
        if not record and not reference:
            again = greedy_tokens(client, model, max_tokens)
            ok, detail, _ = compare(got, again, max_tokens, 1.0)
            res.add("temperature-0 output is deterministic (no reference given)", ok, detail)
    except (HttpError, KeyError, IndexError, ValueError, OSError) as exc:
        res.add("temperature-0 token comparison", False, str(exc))

    want, why = resolve_harmony(client, harmony, model)
    if want == "skip":
        res.add("harmony / tool-call parse", None, f"skipped: not a harmony (gpt-oss) model ({why})")
    else:
        try:
            r = client.chat(
                model,
                [{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
                tools=[WEATHER_TOOL],
                tool_choice="auto",
                max_tokens=512,
                temperature=0,
            )
            msg = r["choices"][0]["message"]
            _, reasoning = message_text(r)
            calls = msg.get("tool_calls") or []
            bad = []
            for c in calls:
                fn = c.get("function") or {}
                try:
                    json.loads(fn.get("arguments") or "")
                except ValueError:
                    bad.append(fn.get("name"))
                if not fn.get("name"):
                    bad.append("<no name>")
            ok = not bad and bool(reasoning.strip())
            if real_checkpoint:
                ok = ok and any((c.get("function") or {}).get("name") == "get_weather" for c in calls)
            res.add(
                "harmony / tool-call parse",
                ok,
                f"{len(calls)} tool call(s), malformed: {bad or 'none'}, reasoning {len(reasoning)} chars",
            )
        except (HttpError, KeyError, IndexError) as exc:
            res.add("harmony / tool-call parse", False, str(exc))

    if not real_checkpoint:
        res.add(
            "arithmetic set (exact answers)", None, "skipped: random or tiny weights (--real-checkpoint off)"
        )
    else:
        right = []
        for q, want_n in ARITHMETIC:
            try:
                r = client.chat(
                    model,
                    [{"role": "user", "content": q + " Reply with the number only."}],
                    max_tokens=1024,
                    temperature=0,
                )
                content, _ = message_text(r)
                right.append(last_integer(content) == want_n)
            except (HttpError, KeyError, IndexError):
                right.append(False)
        res.add("arithmetic set (exact answers)", all(right), f"{sum(right)}/{len(right)} exact")
    res.wall_s = time.monotonic() - start
    return res


def load_reference(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"unreadable reference {path}: {exc}") from exc
