"""A lost node of a cluster: the lines of vLLM 0.33.0 (and torch.distributed and NCCL under it) that mean
another rank is gone, each a verdict with EXIT_RANK naming the rank; a worker's container health, which
cannot be the API's /health."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkserve.serving import health, preflight, rankwatch, vllmconfig

# As the head's log shows them (vLLM's process prefixes included).
LOST = {
    "(EngineCore_DP0 pid=212) TimeoutError: RPC call to execute_model timed out.":
        "did not answer the engine's call",
    "(Worker pid=301) RuntimeError: NCCL error: remote process exited or there was a network error":
        "left the collective",
    "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.":
        "did not join the rendezvous",
    "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to "
    "connect to (10.0.0.1, 29501).": "did not open its rendezvous",
    "[E1202 10:00:00.1 tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:52178": "closed its connection",
}


@pytest.mark.parametrize("line", sorted(LOST))
def test_each_sign_of_a_lost_rank_is_a_verdict_naming_it(line: str) -> None:
    verdict = rankwatch.RankWatch(2, 0).judge(line + "\n")
    assert verdict is not None and verdict.code == preflight.EXIT_RANK == 9
    assert verdict.reason.startswith(f"cluster: lost node rank 1: it {LOST[line]}")
    assert line[:60] in verdict.reason
    worker = rankwatch.RankWatch(2, 1).judge(line)
    assert worker is not None and "lost node rank 0 (the head)" in worker.reason


@pytest.mark.parametrize("line", [
    "(APIServer pid=1) INFO: Application startup complete.",
    "(EngineCore_DP0 pid=212) ERROR EngineCore encountered a fatal error.",  # its cause decides
    "(Worker_TP0 pid=300) WARNING shm_broadcast: No available shared memory broadcast block found",
])
def test_other_lines_are_no_verdict(line: str) -> None:
    assert rankwatch.RankWatch(2, 0).judge(line) is None


def test_a_worker_watches_its_heads_rendezvous_with_exit_9() -> None:
    dog = rankwatch.worker_watchdog("tcp://10.0.0.1:29501")
    assert (dog.url, dog.code) == ("tcp://10.0.0.1:29501", preflight.EXIT_RANK)
    assert dog.interval_s * dog.failures <= 15  # noticed before a restarted head opens its rendezvous


def cmdline(proc: Path, pid: int, *args: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")


def test_a_worker_is_healthy_while_its_headless_vllm_runs(tmp_path: Path) -> None:
    """Its healthcheck was `os.kill(1, 0)`: pid 1 (the container's init) exists as long as the container
    does, whether or not vLLM runs."""
    proc = tmp_path / "proc"
    cmdline(proc, 1, "/opt/venv/bin/python", "-m", "sparkserve.serving")
    assert not health.headless_vllm_runs(proc)
    cmdline(proc, 12, "/opt/venv/bin/python", "-m", vllmconfig.CLI_MODULE, "serve", "--model", "m",
            vllmconfig.HEADLESS)
    assert health.headless_vllm_runs(proc)


@pytest.mark.parametrize(("env", "worker"), [
    ({}, False), ({"SPARKSERVE_NNODES": "2"}, False),
    ({"SPARKSERVE_NNODES": "2", "SPARKSERVE_NODE_RANK": "1"}, True),
    ({"SPARKSERVE_NNODES": "x", "SPARKSERVE_NODE_RANK": "1"}, False)])
def test_the_healthcheck_knows_a_worker_from_its_environment(env: dict[str, str], worker: bool) -> None:
    assert health.is_worker(env) is worker


def test_the_worker_healthcheck_asks_no_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health.os, "environ", {"SPARKSERVE_NNODES": "2", "SPARKSERVE_NODE_RANK": "1"})
    monkeypatch.setattr(health, "probe", lambda *a: pytest.fail("a worker has no /health"))
    monkeypatch.setattr(health, "headless_vllm_runs", lambda: True)
    assert health.main() == 0
    monkeypatch.setattr(health, "headless_vllm_runs", lambda: False)
    assert health.main() == 1
