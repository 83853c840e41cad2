"""Level 6, matrix: every configuration of a YAML file gets its own server and levels 1, 1.5 and 4.

name: spark-profiles
model: /models/gpt-oss-120b          # --model of the server (and the served name)
tokenizer: /models/gpt-oss-120b      # local tokenizer for llama-benchy
hardware: null                       # results/<hardware>/; null = detected
server:
  python: python3
  host: 127.0.0.1
  port: 8000
  ready_timeout_s: 1800
  args: [--max-model-len, "32768"]   # common to every configuration
  env: {}
bench: {preset: quick}               # optional overrides: pp, tg, depth, concurrency, runs
configurations:
  - name: marlin-moe                 # a key of configs/kernel-expectations.toml
    args: [--moe-backend, marlin]
    env: {}
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.bench import presets
from sparkserve.errors import SparkserveError
from sparkserve.levels import benchmark, smoke
from sparkserve.levels.common import Client, LevelResult
from sparkserve.levels.server import Server
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


def run(
    path: Path, store: Path, root: Path, only: list[str] | None = None, work: Path | None = None
) -> LevelResult:
    data = load(path)
    res = LevelResult("6", f"matrix {data.get('name', path.stem)}")
    start = time.monotonic()
    srv = data.get("server") or {}
    host, port = str(srv.get("host", "127.0.0.1")), int(srv.get("port", 8000))
    base_url = f"http://{host}:{port}"
    b = data.get("bench") or {}
    preset = presets.get(str(b.get("preset", "quick"))).with_overrides(
        b.get("pp"), b.get("tg"), b.get("depth"), b.get("concurrency"), b.get("runs")
    )
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
            server.start(float(srv.get("ready_timeout_s", 1800)))
        except SparkserveError as exc:
            server.stop()
            res.add(f"{e.name}: server starts", False, f"{exc}; log {log}")
            continue
        try:
            l1 = smoke.run(Client(base_url))
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
                )
            )
            res.add(f"{e.name}: levels 1.5 + 4", l4.ok, f"{l4.summary()} -> {run_.hardware}/{run_.run_id}")
        finally:
            server.stop()
    res.wall_s = time.monotonic() - start
    return res
