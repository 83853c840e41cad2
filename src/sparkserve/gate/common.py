"""Shared pieces of the levels: an OpenAI-compatible JSON client over httpx and the result record.

The levels read vLLM's answers as raw JSON (the harmony `reasoning` field, tool calls, logprobs), so the
client is a thin layer over httpx rather than the openai SDK's typed models.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.checks import Check
from sparkserve.errors import SparkserveError
from sparkserve.progress import say


class HttpError(Exception):
    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Client:
    def __init__(self, base_url: str, timeout: float = 300, api_key: str = "EMPTY") -> None:
        root = base_url.rstrip("/")
        self.root = root.removesuffix("/v1")
        self.timeout = timeout
        self.api_key = api_key

    def _req(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            # trust_env=False: a proxy of the environment must not stand between the harness and a
            # server on the loopback
            with httpx.Client(timeout=timeout or self.timeout, trust_env=False) as http:
                r = http.request(method, self.root + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise HttpError(None, str(exc) or type(exc).__name__) from exc
        if r.is_error:
            raise HttpError(r.status_code, r.text[:500])
        try:
            return r.json() if r.content else None
        except ValueError as exc:
            raise HttpError(r.status_code, f"not JSON: {r.content[:200]!r}") from exc

    def get(self, path: str, timeout: float | None = None) -> Any:
        return self._req("GET", path, timeout=timeout)

    def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        return self._req("POST", path, body, timeout=timeout)

    def models(self) -> list[dict[str, Any]]:
        return list(self.get("/v1/models")["data"])

    def model_id(self) -> str:
        ms = self.models()
        if not ms:
            raise SparkserveError(f"{self.root}/v1/models lists no model")
        return str(ms[0]["id"])

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        return dict(self.post("/v1/chat/completions", {"model": model, "messages": messages, **kw}))

    def completion(self, model: str, prompt: str, **kw: Any) -> dict[str, Any]:
        return dict(self.post("/v1/completions", {"model": model, "prompt": prompt, **kw}))

    def wait_ready(self, timeout_s: float, alive: Any = None) -> float:
        """Poll /v1/models until it answers (`alive()` False aborts early); returns seconds waited."""
        start = time.monotonic()
        last = "no answer yet"
        while True:
            try:
                # a short timeout per poll: one request that hangs must not hold up the wait
                self.get("/v1/models", timeout=10)
                return time.monotonic() - start
            except HttpError as exc:
                last = str(exc)
            if alive is not None and not alive():
                raise SparkserveError("the server process exited before it became ready")
            if time.monotonic() - start > timeout_s:
                raise SparkserveError(f"{self.root} not ready after {timeout_s:.0f}s (last answer: {last})")
            time.sleep(2)


@dataclass
class LevelResult:
    level: str
    title: str
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok is not False for c in self.checks)

    def add(self, name: str, ok: bool | None, detail: str = "") -> Check:
        c = Check(name, ok, detail)
        self.checks.append(c)
        say(c.line())
        return c

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "title": self.title,
            "ok": self.ok,
            "wall_s": round(self.wall_s, 2),
            "checks": [c.to_dict() for c in self.checks],
            "metrics": self.metrics,
        }

    def write(self, path: Path | None) -> None:
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    def summary(self) -> str:
        failed = [c.name for c in self.checks if c.ok is False]
        skipped = sum(1 for c in self.checks if c.ok is None)
        head = f"level {self.level} ({self.title}): {'PASS' if self.ok else 'FAIL'} in {self.wall_s:.1f}s"
        tail = f"; failed: {', '.join(failed)}" if failed else ""
        return head + (f"; {skipped} skipped" if skipped else "") + tail


def message_text(resp: dict[str, Any]) -> tuple[str, str]:
    """(content, reasoning) of the first choice; vLLM 0.33 names the field `reasoning`
    (older servers and other engines: `reasoning_content`)."""
    msg = resp["choices"][0].get("message") or {}
    content = msg.get("content") or ""
    reasoning = msg.get("reasoning") or msg.get("reasoning_content") or ""
    return str(content), str(reasoning)


def is_harmony_model(client: Client, model: str) -> tuple[bool, str]:
    """gpt-oss speaks harmony; decide from the served id/root and, when local, its config.json."""
    try:
        entry = next((m for m in client.models() if m.get("id") == model), {})
    except HttpError:
        entry = {}
    root = str(entry.get("root") or model)
    cfg = Path(root) / "config.json"
    if cfg.is_file():
        try:
            mt = json.loads(cfg.read_text()).get("model_type", "")
            return mt == "gpt_oss", f"config.json model_type={mt!r}"
        except (OSError, ValueError):
            pass
    hit = "gpt-oss" in (model + root).lower() or "gpt_oss" in (model + root).lower()
    return hit, f"served model {model!r} (root {root!r})"


def resolve_harmony(client: Client, harmony: str, model: str) -> tuple[str, str]:
    """The --harmony setting (auto | required | skip) for this server: ("required" or "skip", why)."""
    if harmony != "auto":
        return harmony, "forced by --harmony"
    is_h, why = is_harmony_model(client, model)
    return ("required" if is_h else "skip"), why
