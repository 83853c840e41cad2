"""Run llama-benchy with everything it needs offline and a live progress line.

Offline means: a local tokenizer (`--tokenizer`), the book served on 127.0.0.1 (bench.book),
`HF_HUB_OFFLINE=1` / `TRANSFORMERS_OFFLINE=1` (without them llama-benchy retries the hub for minutes),
a private HOME (its book cache lives under ~/.cache/llama-benchy), and NO_PROXY for 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve_lab import gzfile
from sparkserve_lab.bench import batches, book
from sparkserve_lab.bench.presets import Preset
from sparkserve_lab.bench.results import Row, require_results


@dataclass
class BenchRequest:
    base_url: str
    tokenizer: Path
    preset: Preset
    out_dir: Path
    model: str | None = None
    book_file: Path | None = None
    benchy: list[str] | None = None
    skip_coherence: bool = True
    exact_tg: bool = True
    extra_args: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    # Random-weight gpt-oss: relay llama-benchy's requests through bench.relay (see there why).
    token_relay: bool = False


@dataclass
class BenchOutcome:
    result_file: Path
    rows: list[Row]
    command: list[str]
    book_sha256: str
    wall_s: float
    requests_done: int
    request_errors: int
    relay: dict[str, Any] | None = None


# Stored gzipped: a load preset's events are about 1.5 MB a run plain, a tenth of that gzipped, and the
# store travels with the tree to every GPU call, whose size is capped.
PROGRESS = "llama-benchy-progress.jsonl.gz"
BATCHES = "batches.json"


def write_batches(out_dir: Path) -> dict[str, Any]:
    """batches.json from the progress events kept in `out_dir`: every batch's end-to-end time."""
    data = batches.summary(batches.batches(batches.read_events(out_dir / PROGRESS)))
    (out_dir / BATCHES).write_text(json.dumps(data, indent=1) + "\n")
    return data


def v1_url(base_url: str) -> str:
    u = base_url.rstrip("/")
    return u if u.endswith("/v1") else u + "/v1"


def benchy_command() -> list[str]:
    """`python -m llama_benchy` with this interpreter when it can import llama_benchy (also when it was
    installed with `pip install --target` into a PYTHONPATH directory, whose console script would carry
    another machine's interpreter path), else a `llama-benchy` executable next to it or on PATH."""
    import importlib.util

    if importlib.util.find_spec("llama_benchy") is not None:
        return [sys.executable, "-m", "llama_benchy"]
    exe = Path(sys.executable).with_name("llama-benchy")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("llama-benchy")
    if found:
        return [found]
    raise SparkserveError("llama-benchy not found: pip install 'sparkserve-lab[bench]' (llama-benchy==0.4.0)")


def served_model(base_url: str) -> str:
    from sparkserve.gate.common import Client, HttpError

    try:
        return Client(base_url, timeout=30).model_id()
    except (HttpError, KeyError, TypeError) as exc:
        raise SparkserveError(f"cannot read the served model from {base_url}/v1/models: {exc}") from exc


class _Progress:
    """Follows llama-benchy's --emit-progress JSONL and keeps one live status line on stderr."""

    def __init__(self, path: Path, expected: int) -> None:
        self.path, self.expected = path, expected
        self.done = self.errors = 0
        self.current = ""
        self.last_tps: float | None = None
        self._stop = threading.Event()
        self._tty = sys.stderr.isatty()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._print(final=True)

    def _handle(self, ev: dict[str, Any]) -> None:
        t = ev.get("type")
        if t == "request_start":
            self.current = (
                f"pp{ev.get('prompt_size')} tg{ev.get('response_size')} d{ev.get('context_size')} "
                f"c{ev.get('concurrency')}"
            )
        elif t == "request_end":
            self.done += 1
            if ev.get("error"):
                self.errors += 1
            secs, toks = ev.get("decode_seconds") or 0, ev.get("total_tokens") or 0
            if secs > 0 and toks > 1:
                self.last_tps = (toks - 1) / secs

    def _drain(self, pos: int) -> int:
        try:
            with self.path.open() as f:
                f.seek(pos)
                while True:
                    line = f.readline()
                    if not line.endswith("\n"):
                        return pos
                    pos = f.tell()
                    with contextlib.suppress(ValueError):
                        self._handle(json.loads(line))
        except OSError:
            return pos

    def _follow(self) -> None:
        pos, last_print = 0, 0.0
        while not self._stop.is_set():
            pos = self._drain(pos)
            now = time.monotonic()
            if now - last_print >= (0.5 if self._tty else 15.0):
                last_print = now
                self._print()
            self._stop.wait(0.25)
        self._drain(pos)  # events written between the last poll and the end of llama-benchy

    def _print(self, final: bool = False) -> None:
        pct = f" ({100 * self.done / self.expected:.0f}%)" if self.expected else ""
        tps = f", last decode {self.last_tps:.1f} tok/s" if self.last_tps else ""
        msg = (
            f"  bench: {self.done}/{self.expected} requests{pct}, {self.current or 'warming up'}{tps}, "
            f"errors {self.errors}, {time.monotonic() - self._start:.0f}s"
        )
        if self._tty:
            sys.stderr.write("\r" + msg.ljust(100) + ("\n" if final else ""))
            sys.stderr.flush()
        else:
            say(msg)


def local_tokenizer(given: Path) -> Path:
    """A folder holding tokenizer.json (or the file itself); a Hugging Face repo id (`org/name`) that is
    not a local path is looked up in the local HF cache, never on the network."""
    if (given / "tokenizer.json").exists() or given.is_file():
        return given
    repo = str(given)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", repo) and not given.exists():
        try:
            from huggingface_hub import snapshot_download

            found = Path(snapshot_download(repo, local_files_only=True, allow_patterns=["tokenizer*"]))
        except Exception as exc:
            raise SparkserveError(f"--tokenizer {repo}: not in the local Hugging Face cache ({exc}); "
                                  "download the model first, or give a folder holding tokenizer.json"
                                  ) from None
        if (found / "tokenizer.json").exists():
            return found
    raise SparkserveError(f"--tokenizer {given}: no tokenizer.json (a local tokenizer is needed offline; a "
                          "folder, or a Hugging Face repo id already in the cache)")


def run(req: BenchRequest) -> BenchOutcome:
    req.out_dir.mkdir(parents=True, exist_ok=True)
    result_file = req.out_dir / "llama-benchy.json"
    log_file = req.out_dir / "llama-benchy.log"
    tokenizer = local_tokenizer(req.tokenizer)
    model = req.model or served_model(req.base_url)
    text = book.load(req.book_file)
    p = req.preset
    with contextlib.ExitStack() as stack:
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="sparkserve-benchy-"))
        url = stack.enter_context(book.serve(text))
        target, relay_stats = req.base_url, None
        if req.token_relay:
            from sparkserve_lab.bench.relay import token_relay

            target, relay_stats = stack.enter_context(token_relay(req.base_url))
            say(f"  token relay {target} -> {req.base_url} (random weights: harmony withholds text)")
        progress_file = Path(home) / "progress.jsonl"
        cmd = [
            *(req.benchy or benchy_command()),
            "--base-url",
            v1_url(target),
            "--model",
            model,
            "--served-model-name",
            model,
            "--tokenizer",
            str(tokenizer),
            "--book-url",
            url,
            "--pp",
            *map(str, p.pp),
            "--tg",
            *map(str, p.tg),
            "--depth",
            *map(str, p.depth),
            "--concurrency",
            *map(str, p.concurrency),
            "--runs",
            str(p.runs),
            "--format",
            "json",
            "--save-result",
            str(result_file),
            "--emit-progress",
            str(progress_file),
        ]
        if p.prefix_caching:
            cmd.append("--enable-prefix-caching")
        if req.skip_coherence:
            cmd.append("--skip-coherence")
        if req.exact_tg:
            cmd.append("--exact-tg")
        cmd += req.extra_args
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HOME=home,
            HF_HOME=str(Path(home) / "hf"),
            PYTHONUNBUFFERED="1",
        )
        env["NO_PROXY"] = env["no_proxy"] = ",".join(
            x for x in ("127.0.0.1", "localhost", os.environ.get("NO_PROXY", "")) if x
        )
        result_file.unlink(missing_ok=True)
        say(f"==> llama-benchy: {p.name} ({p.expected_requests()} timed requests) against {req.base_url}")
        start = time.monotonic()
        with log_file.open("w") as log, _Progress(progress_file, p.expected_requests()) as prog:
            try:
                rc = subprocess.run(
                    cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False, timeout=req.timeout_s
                ).returncode
            except subprocess.TimeoutExpired as exc:
                raise SparkserveError(f"llama-benchy ran past {req.timeout_s}s; see {log_file}") from exc
        wall = time.monotonic() - start
        # the timed requests' events: a batch's end-to-end time is only in them (bench.batches)
        if progress_file.exists():
            gzfile.write_gzipped(progress_file, req.out_dir / PROGRESS)
            write_batches(req.out_dir)
    if rc != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-15:])
        raise SparkserveError(f"llama-benchy exited {rc}; last lines of {log_file}:\n{tail}")
    data = json.loads(result_file.read_text()) if result_file.exists() else None
    rows = require_results(data, str(result_file))
    if prog.errors:
        say(f"  warning: {prog.errors} request(s) failed during the benchmark")
    relay = None
    if relay_stats is not None:
        relay = {
            "used": True,
            "why": "random weights: vLLM's harmony parser withholds text until the end of a request",
            "mark": "delta.content of streamed chunks that carry token ids and no text",
            **relay_stats.to_dict(),
        }
        say(
            f"  token relay: {relay_stats.marked_chunks} of {relay_stats.streamed_chunks} streamed chunks "
            "carried token ids without text and were marked"
        )
    return BenchOutcome(result_file, rows, cmd, book.sha256(text), wall, prog.done, prog.errors, relay)
