"""The lab's one launcher (sparkserve_lab/server.py): the server a lab verb starts is the entrypoint in
the container environment of its profile, so vLLM gets exactly the command line and environment the
entrypoint's launch plan says, for every shipped profile; and the fixture waits for /health and
/v1/models and stops every process group under it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from entrypoint_fakes import (
    GPT_OSS_CONFIG,
    LLAMA_CONFIG,
    fake_vllm,
    model_folder,
    plan_of,
    python_path,
    started_by,
)
from sparkserve_lab import server as lab_server
from sparkserve_lab.levels import matrix

from sparkserve.gate.common import Client
from sparkserve.serving import caches, flags, profiles

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted(path.stem for path in (ROOT / "profiles").glob("*.env"))
# What a GPU host's lab runs in besides what the launcher takes from it.
HOST = {"PATH": "/usr/bin:/bin", "HOME": "/home/lab", "PYTHONPATH": "/lab/src", "LAB_ONLY": "x",
        "HF_TOKEN": "secret", "VLLM_USE_V1": "0", "SPARKSERVE_TARGET": "cpu"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("name", PROFILES)
def test_vllm_gets_the_plan_the_lab_records_for_every_shipped_profile(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU host's matrix: a local config-only checkpoint, random weights, the harness's address and
    port, a GPU of the host."""
    model = model_folder(tmp_path / "gpt-oss-120b", GPT_OSS_CONFIG)
    data = matrix.Matrix(profile=name, tokenizer=str(model), configurations=(),
                         variables={"MODEL": str(model)}, random_weights=True,
                         server=matrix.ServerSettings(python="/opt/harness/python3", port=8123,
                                                      env={"CUDA_VISIBLE_DEVICES": "1"}))
    res = profiles.resolve(name, ROOT, matrix.common_settings(data))
    monkeypatch.setattr(lab_server.os, "environ", HOST)
    server = matrix.server_for(matrix.MatrixEntry(name, res), data.server, tmp_path / "work", ROOT)
    assert server.command == ["/opt/harness/python3", "-m", "sparkserve.serving"]

    recorded = plan_of(server.env, monkeypatch)  # what the fixture's --plan run records
    argv, env = started_by(server.env, monkeypatch)  # what the entrypoint, serving, starts
    assert argv == recorded.argv and env == recorded.env

    # the profile's own command line, served where the harness says
    assert argv[1:] == flags.vllm_argv(res.profile)[1:]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    # every variable of the resolved profile reaches vLLM, with what the entrypoint adds to it
    assert {k: env[k] for k in res.env} == res.env
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    build = Path(env["VLLM_CACHE_ROOT"]).parent
    assert build.parent == tmp_path / "work" / "cache"
    assert {env[var] for var in caches.FOLDERS} == {str(build / sub) for sub in caches.FOLDERS.values()}
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["PYTHONPATH"] == "/lab/src"
    # and nothing else of the lab's environment
    assert not {"LAB_ONLY", "HF_TOKEN", "VLLM_USE_V1"} & set(env)
    assert env["SPARKSERVE_TARGET"] == res.env["SPARKSERVE_TARGET"] != "cpu"


def test_the_fixture_serves_through_the_entrypoint_and_stops_every_group(tmp_path: Path) -> None:
    """The real entrypoint in a child process, serving a vLLM stand-in: the stand-in got the recorded
    plan's command line and environment, and a helper of it that ignores SIGTERM does not outlive the
    stop."""
    site = fake_vllm(tmp_path / "site")
    model = model_folder(tmp_path / "tiny", LLAMA_CONFIG)
    port = _free_port()
    res = profiles.resolve("tests/docker/cpu/cpu.env", ROOT, {
        "MODEL": str(model), "LOAD_FORMAT": "dummy", "SPARKSERVE_LISTEN": "127.0.0.1",
        "SPARKSERVE_PORT": str(port)})
    record, child = tmp_path / "record.json", tmp_path / "child.pid"
    server = lab_server.server_for(res, tmp_path / "work", "cpu", python=sys.executable,
                                   extra_env={"VLLM_TEST_RECORD": str(record), "VLLM_TEST_CHILD": str(child)},
                                   host={"PATH": os.environ["PATH"], "PYTHONPATH": python_path(site)},
                                   root=ROOT)
    with lab_server.serving(server, ready_timeout_s=60, grace_s=2) as srv:
        assert Client(srv.base_url).model_id() == "tiny"
        assert srv.pid_file.read_text().strip() == str(srv.proc.pid if srv.proc else None)
        got = json.loads(record.read_text())
        assert srv.plan is not None and json.loads(srv.plan_file.read_text()) == srv.plan.public()
        assert got["argv"] == srv.plan.argv[3:] and srv.plan.argv[1:3] == ["-m", flags.SERVER_MODULE]
        assert got["env"] == srv.plan.env
        assert srv.pid != srv.proc.pid and srv.vllm_command == srv.plan.argv  # type: ignore[union-attr]
        helper = int(child.read_text())
        assert _alive(helper)
        t = time.monotonic()
    assert time.monotonic() - t < 30
    assert not _alive(helper), "a helper that ignores SIGTERM survived"
    assert not server.pid_file.exists()


def test_a_profile_the_entrypoint_refuses_is_not_started(tmp_path: Path) -> None:
    """The entrypoint's refusal, with its exit code's meaning, before any server process."""
    res = profiles.resolve("tests/docker/cpu/cpu.env", ROOT, {"MODEL": str(tmp_path / "absent")})
    server = lab_server.server_for(res, tmp_path / "work", "cpu", python=sys.executable,
                                   host={"PATH": os.environ["PATH"], "PYTHONPATH": python_path(tmp_path)},
                                   root=ROOT)
    refused = r"refuses to start it \(exit 4: the model .*no such folder"
    with pytest.raises(lab_server.NotReady, match=refused), lab_server.serving(server, ready_timeout_s=60):
        pytest.fail("a refused server is not served")
    assert server.proc is None and not server.log.exists()


def test_a_port_another_server_answers_on_is_refused(tmp_path: Path) -> None:
    """Its answers would pass for the new server's readiness."""
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    res = profiles.resolve("tests/docker/cpu/cpu.env", ROOT, {
        "MODEL": str(model_folder(tmp_path / "tiny", LLAMA_CONFIG)), "LOAD_FORMAT": "dummy",
        "SPARKSERVE_LISTEN": "127.0.0.1", "SPARKSERVE_PORT": str(other.server_address[1])})
    server = lab_server.server_for(res, tmp_path / "work", "cpu", python=sys.executable,
                                   host={"PATH": os.environ["PATH"],
                                         "PYTHONPATH": python_path(fake_vllm(tmp_path / "site"))},
                                   root=ROOT)
    try:
        with pytest.raises(lab_server.NotReady, match="something already answers on"):
            server.start(ready_timeout_s=60)
        assert server.proc is None
    finally:
        other.shutdown()


def test_a_cluster_worker_is_ready_once_its_vllm_runs_without_any_health(tmp_path: Path) -> None:
    """A worker (node rank > 0) has no API server: the launcher waited for /health, so it could not
    start one (and the head's rendezvous answering on the worker's watchdog URL read as `something already
    answers`). Now its start returns once the entrypoint has started `vllm serve --headless`."""
    site = fake_vllm(tmp_path / "site")
    model = model_folder(tmp_path / "tiny", LLAMA_CONFIG)
    record = tmp_path / "record.json"
    with socket.socket() as head:  # the head's rendezvous already answers
        head.bind(("127.0.0.1", 0))
        head.listen()
        res = profiles.resolve("tests/docker/cpu/cpu.env", ROOT, {
            "MODEL": str(model), "LOAD_FORMAT": "dummy", "SPARKSERVE_NNODES": "2",
            "SPARKSERVE_NODE_RANK": "1", "SPARKSERVE_MASTER_ADDR": "127.0.0.1",
            "SPARKSERVE_MASTER_PORT": str(head.getsockname()[1])})
        server = lab_server.server_for(res, tmp_path / "work", "worker", python=sys.executable,
                                       extra_env={"VLLM_TEST_RECORD": str(record)},
                                       host={"PATH": os.environ["PATH"], "PYTHONPATH": python_path(site)},
                                       root=ROOT)
        with lab_server.serving(server, ready_timeout_s=60, grace_s=2) as srv:
            assert srv.plan is not None and srv.plan.worker
            assert srv.plan.argv[-1] == flags.HEADLESS and srv.pid != srv.proc.pid  # type: ignore[union-attr]
            for _ in range(100):
                if record.exists() and record.read_text():
                    break
                time.sleep(0.1)
            assert json.loads(record.read_text())["argv"] == srv.plan.argv[3:]
        assert not _alive(srv.pid)


def test_the_serve_verb_runs_a_command_against_the_server(tmp_path: Path) -> None:
    """`sparkserve-lab serve --profile P --set ... -- COMMAND`: the command sees the server's URL and pid;
    its exit status is the verb's."""
    site = fake_vllm(tmp_path / "site")
    model = model_folder(tmp_path / "tiny", LLAMA_CONFIG)
    check = ("import os, sys, urllib.request; "
             "urllib.request.urlopen(os.environ['SERVER_URL'] + '/v1/models', timeout=5); "
             "sys.exit(int(os.path.exists(f\"/proc/{os.environ['SERVER_PID']}\")) * 7)")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": python_path(site)}
    done = subprocess.run(
        [sys.executable, "-m", "sparkserve_lab", "serve", "--profile", "tests/docker/cpu/cpu.env",
         "--set", f"MODEL={model}", "--set", "LOAD_FORMAT=dummy", "--port", str(_free_port()),
         "--work", str(tmp_path / "work"),
         "--env", f"VLLM_TEST_RECORD={tmp_path / 'r.json'}", "--env", f"VLLM_TEST_CHILD={tmp_path / 'c.pid'}",
         "--grace", "2", "--", sys.executable, "-c", check],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 7, done.stderr  # the command ran while the server lived, and failed with 7
    assert "ready after" in done.stderr
    helper = int((tmp_path / "c.pid").read_text())
    assert not _alive(helper)
