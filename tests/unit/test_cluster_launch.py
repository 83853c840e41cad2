"""The launch plan of each node rank (`python -m sparkserve.serving --plan`): the head's is vLLM's API
server with the cluster flags, a worker's is `vllm serve ... --headless` with the same arguments, after
the same profile, device and model checks; a worker reads no API key and serves nothing to refuse."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from sparkserve.serving import __main__ as entry
from sparkserve.serving import flags, launch, preflight, rankwatch, supervise, vllmconfig

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"SPARKSERVE_NNODES": "2", "SPARKSERVE_MASTER_ADDR": "10.0.0.1", "SPARKSERVE_MASTER_PORT": "29555"}


class ContainerEnv(dict[str, str]):
    """os.environ of a container: pytest's own PYTEST_CURRENT_TEST does not get in."""

    def __setitem__(self, key: str, value: str) -> None:
        if not key.startswith("PYTEST_"):
            super().__setitem__(key, value)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A container's environment with a config-only gpt-oss (random weights) and a GPU that passes."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    env = ContainerEnv(PATH="/usr/bin:/bin", SPARKSERVE_ROOT=str(ROOT), HF_HOME=str(tmp_path / "hf"),
                       MODEL=str(model), LOAD_FORMAT="dummy", MXFP4_LAYERS="moe",
                       SPARKSERVE_CACHE_DIR=str(tmp_path / "cache"),
                       SPARKSERVE_STATE_DIR=str(tmp_path / "state"))
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(preflight, "check_gpu", lambda p, archs, env: [])
    monkeypatch.setattr(supervise, "run", lambda *a, **k: pytest.fail("--plan must not start vLLM"))
    yield env


def plan(env: dict[str, str], **more: str) -> launch.LaunchPlan:
    env.update(more)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = entry.main([launch.PLAN])
    assert rc == 0, f"--plan exited {rc}"
    return launch.LaunchPlan.from_public(json.loads(out.getvalue()))


def test_each_rank_plans_its_own_command_from_the_same_arguments(node: dict[str, str],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The worker's command was an inline program in the Ansible template that rebuilt it by itself."""
    head = plan(node, **CLUSTER)
    assert head.argv[1:3] == ["-m", flags.SERVER_MODULE] and flags.HEADLESS not in head.argv
    assert "10.0.0.1:29555" in capsys.readouterr().err  # the cluster line of the start lines
    worker = plan(node, SPARKSERVE_NODE_RANK="1")
    assert worker.argv[1:4] == ["-m", vllmconfig.CLI_MODULE, "serve"] and worker.argv[-1] == flags.HEADLESS
    args = head.argv[3:]
    args[args.index("--node-rank") + 1] = "1"
    assert worker.argv[4:-1] == args
    assert "node rank 1 of 2, a headless worker" in capsys.readouterr().err


def test_a_single_node_plan_has_no_cluster_line(node: dict[str, str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(node).argv[1:3] == ["-m", flags.SERVER_MODULE]
    assert "cluster:" not in capsys.readouterr().err


def test_the_worker_needs_no_api_key_and_exposes_nothing(node: dict[str, str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The head reads the key (an unreadable file exits 2) and refuses a public address without one; the
    worker runs no API server, so neither applies to it and its vLLM gets no key."""
    public = {**CLUSTER, "SPARKSERVE_PUBLISH_ADDRESS": "192.0.2.7"}
    node.update(public)
    assert entry.main([launch.PLAN]) == preflight.EXIT_PROFILE
    assert "serves the API to other machines without an API key" in capsys.readouterr().err
    worker = plan(node, SPARKSERVE_NODE_RANK="1", API_KEY_FILE=str(tmp_path / "absent"))
    assert launch.API_KEY not in worker.env
    assert "API key" not in capsys.readouterr().err


def test_the_worker_passes_the_same_model_check(node: dict[str, str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    node.update(CLUSTER, SPARKSERVE_NODE_RANK="1", MODEL="/models/absent", MXFP4_LAYERS="none")
    assert entry.main([launch.PLAN]) == preflight.EXIT_MODEL
    assert "model not available" in capsys.readouterr().err


def test_the_worker_passes_the_same_profile_check(node: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    node.update(CLUSTER, SPARKSERVE_NODE_RANK="2")
    assert entry.main([launch.PLAN]) == preflight.EXIT_PROFILE
    assert "SPARKSERVE_NODE_RANK='2': with SPARKSERVE_NNODES=2 the node ranks are 0 to 1" in \
        capsys.readouterr().err


def supervised(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, **more: str) -> dict[str, object]:
    """What the entrypoint, serving, hands its supervisor."""
    env.update(more)
    seen: dict[str, object] = {}

    def run(argv: list[str], on_line: object, watchdog: supervise.Watchdog | None = None,
            env: dict[str, str] | None = None, judge: object = None) -> int:
        seen.update(argv=argv, watchdog=watchdog, judge=judge)
        return 0

    monkeypatch.setattr(supervise, "run", run)
    with redirect_stdout(io.StringIO()):
        assert entry.main([]) == 0
    return seen


def test_a_worker_is_watched_at_its_heads_rendezvous_not_at_a_health_url(
        node: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog asked http://.../health of every node, so a worker (no API server) would have been
    stopped as hung had it ever answered; and nothing read a lost rank in vLLM's output."""
    seen = supervised(node, monkeypatch, **CLUSTER, SPARKSERVE_NODE_RANK="1")
    assert seen["watchdog"] == rankwatch.worker_watchdog("tcp://10.0.0.1:29555")
    judge = seen["judge"]
    assert callable(judge) and judge("RPC call to execute_model timed out").code == preflight.EXIT_RANK


def test_the_head_keeps_its_health_watchdog_and_reads_for_a_lost_rank(
        node: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen = supervised(node, monkeypatch, **CLUSTER, SPARKSERVE_PORT="8123")
    assert seen["watchdog"] == supervise.Watchdog("http://127.0.0.1:8123/health")
    judge = seen["judge"]
    assert callable(judge) and "lost node rank 1" in judge("Connection closed by peer [10.0.0.2]:1").reason


def test_one_node_has_no_judge(node: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """On one node these lines mean a local fault, which vLLM's own exit status reports."""
    assert supervised(node, monkeypatch)["judge"] is None
