"""Level 6, matrix: every configuration of a YAML file gets its own server and levels 1, 1.5 and 4.

name: spark-profiles
model: /models/gpt-oss-120b          # --model of the server (and the served name)
tokenizer: /models/gpt-oss-120b      # local tokenizer for llama-benchy
hardware: null                       # results/<hardware>/; null = detected
random_weights: false                # true: --load-format dummy runs (level 1's harmony check is not
                                     #   applicable, llama-benchy goes through bench.relay)
kernel_rules: null                   # level-1.5 rules (default configs/engine-kernels.toml)
server:
  python: python3
  host: 127.0.0.1
  port: 8000
  ready_timeout_s: 1800
  args: [--max-model-len, "32768"]   # common to every configuration
  env: {}
bench: {preset: quick}               # optional overrides: pp, tg, depth, concurrency, runs, timeout_s
configurations:
  - name: marlin-moe                 # a key of configs/engine-kernels.toml
    args: [--moe-backend, marlin]
    env: {}

Each server writes its log and a `<log>.pid` file (the server's process group) to the work directory;
SIGTERM / SIGINT stop the running server before the matrix exits.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.harness.bench import presets
from sparkserve.harness.levels import benchmark, smoke
from sparkserve.harness.levels.common import Client, LevelResult
from sparkserve.harness.levels.server import Server
from sparkserve.progress import say


@dataclass
class MatrixEntry:
    name: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def load(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".json":
        import json

        data = json.loads(text)
    else:
        try:
            import yaml
        except ImportError as exc:
            raise SparkserveError("matrix files need PyYAML: pip install 'sparkserve[bench]'") from exc
        data = yaml.safe_load(text)
    if not isinstance(data, dict) or not data.get("configurations"):
        raise SparkserveError(f"{path}: needs a `configurations` list")
    for key in ("model", "tokenizer"):
        if not data.get(key):
            raise SparkserveError(f"{path}: needs `{key}`")
    return data


def entries(data: dict[str, Any]) -> list[MatrixEntry]:
    out = []
    for c in data["configurations"]:
        if not isinstance(c, dict) or "name" not in c:
            raise SparkserveError("each configuration needs a `name`")
        out.append(
            MatrixEntry(
                str(c["name"]),
                [str(a) for a in c.get("args", [])],
                {str(k): str(v) for k, v in (c.get("env") or {}).items()},
            )
        )
    return out


@contextlib.contextmanager
def _stop_on_term() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so `finally` blocks stop the server (e.g. under `timeout`)."""

    def handler(signum: int, frame: object) -> None:
        say(f"level 6: signal {signum}: stopping the server, leaving the matrix")
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _truthy(v: Any) -> bool:
    return v is True or str(v).lower() in ("1", "true", "yes")


def run(
    path: Path, store: Path, root: Path, only: list[str] | None = None, work: Path | None = None
) -> LevelResult:
    with _stop_on_term():
        return _run(path, store, root, only, work)


def _run(path: Path, store: Path, root: Path, only: list[str] | None, work: Path | None) -> LevelResult:
    data = load(path)
    known = [e.name for e in entries(data)]
    unknown = [n for n in only or [] if n not in known]
    if unknown:
        raise SparkserveError(f"{path}: no configuration {', '.join(unknown)} (known: {', '.join(known)})")
    random_weights = _truthy(data.get("random_weights", False))
    exp = data.get("kernel_rules")
    kernel_rules = (Path(exp) if Path(exp).is_absolute() else root / exp) if exp else None
    res = LevelResult("6", f"matrix {data.get('name', path.stem)}")
    start = time.monotonic()
    srv = data.get("server") or {}
    host, port = str(srv.get("host", "127.0.0.1")), int(srv.get("port", 8000))
    base_url = f"http://{host}:{port}"
    b = data.get("bench") or {}
    preset = presets.get(str(b.get("preset", "quick"))).with_overrides(
        b.get("pp"), b.get("tg"), b.get("depth"), b.get("concurrency"), b.get("runs")
    )
    bench_timeout = float(b["timeout_s"]) if b.get("timeout_s") else None
    work = work or root / ".work" / "matrix"
    for e in entries(data):
        if only and e.name not in only:
            continue
        say(f"==> matrix: {e.name}")
        cmd = [
            str(srv.get("python", "python3")),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(data["model"]),
            "--host",
            host,
            "--port",
            str(port),
            *[str(a) for a in srv.get("args", [])],
            *e.args,
        ]
        env = {**{str(k): str(v) for k, v in (srv.get("env") or {}).items()}, **e.env}
        log = work / f"{e.name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
        server = Server(cmd, env, log, base_url)
        try:
            try:
                server.start(float(srv.get("ready_timeout_s", 1800)))
            except SparkserveError as exc:
                res.add(f"{e.name}: server starts", False, f"{exc}; log {log}")
                continue
            l1 = smoke.run(Client(base_url), random_weights=random_weights)
            l1_file = work / f"{e.name}-level1.json"
            l1.write(l1_file)
            res.add(f"{e.name}: level 1", l1.ok, l1.summary())
            run_, l4 = benchmark.run(
                benchmark.BenchSpec(
                    base_url=base_url,
                    tokenizer=Path(str(data["tokenizer"])),
                    preset=preset,
                    configuration=e.name,
                    store=store,
                    root=root,
                    hardware=data.get("hardware"),
                    engine_log=log,
                    server_pid=server.pid,
                    serve_python=str(srv.get("python", "python3")),
                    attach=(l1_file,),
                    kernel_rules=kernel_rules,
                    timeout_s=bench_timeout,
                    token_relay=random_weights,
                    random_weights=random_weights,
                )
            )
            res.add(f"{e.name}: levels 1.5 + 4", l4.ok, f"{l4.summary()} -> {run_.hardware}/{run_.run_id}")
        finally:
            server.stop()
    res.wall_s = time.monotonic() - start
    return res
