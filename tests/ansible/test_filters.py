"""The filters of ansible/plugins/filter/sparkserve.py on recorded DGX Spark outputs (tests/ansible/data)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
PLUGIN = ROOT / "ansible/plugins/filter/sparkserve.py"
_spec = importlib.util.spec_from_file_location("sparkserve_filters", PLUGIN)
assert _spec and _spec.loader
f = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(f)

PEER = "192.168.100.11"


def recorded(name: str) -> tuple[list[dict[str, object]], dict[str, str]]:
    ports = f.ibdev2netdev((DATA / "ibdev2netdev" / f"{name}.txt").read_text())
    route = f.ip_route_get((DATA / "ibdev2netdev" / f"{name}.route").read_text())
    return ports, route


def test_parse_one_port_spark() -> None:
    ports, route = recorded("one-port")
    assert len(ports) == 4
    assert ports[3] == {"ibdev": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1", "state": "Up"}
    assert route == {"dst": PEER, "dev": "enp1s0f1np1", "src": "192.168.100.10", "via": ""}


def test_one_port_selects_the_routed_port_not_its_twin() -> None:
    ports, route = recorded("one-port")
    port = f.cluster_port(ports, route, PEER)
    env = f.cluster_net_env(port)
    # The twin roceP2p1s0f1 is Up too (same cable, second PCIe link) but carries no route to the peer.
    assert env == {
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "TP_SOCKET_IFNAME": "enp1s0f1np1",
        "UCX_NET_DEVICES": "enp1s0f1np1",
        "NCCL_IB_HCA": "=rocep1s0f1:1",
    }
    assert port["src"] == "192.168.100.10"


def test_two_port_spark_names_only_the_port_to_the_peer() -> None:
    ports, route = recorded("two-port")
    assert all(p["state"] == "Up" for p in ports)
    env = f.cluster_net_env(f.cluster_port(ports, route, PEER))
    assert env["NCCL_IB_HCA"] == "=rocep1s0f1:1"
    assert "rocep1s0f0" not in env["NCCL_IB_HCA"]  # up, but cabled to another machine


def test_port_down_fails_naming_the_port() -> None:
    ports, route = recorded("port-down")
    with pytest.raises(f.SparkserveNetError, match=r"enp1s0f1np1 \(rocep1s0f1 port 1\), which is Down"):
        f.cluster_port(ports, route, PEER)


def test_cabled_elsewhere_fails_naming_the_route() -> None:
    ports, route = recorded("cabled-elsewhere")
    assert route["via"] == "192.168.1.1"
    with pytest.raises(f.SparkserveNetError, match=r"leaves through 'enP7s7', which is not a ConnectX port"):
        f.cluster_port(ports, route, PEER)


def test_no_rdma_ports() -> None:
    with pytest.raises(f.SparkserveNetError, match="lists no RDMA port"):
        f.cluster_port([], {"dev": "eth0"}, PEER)


def test_garbage_lines_and_no_route() -> None:
    with pytest.raises(f.SparkserveNetError, match="line 2"):
        f.ibdev2netdev("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\nmlx5_0 is not here\n")
    with pytest.raises(f.SparkserveNetError, match="no route"):
        f.ip_route_get("")
    with pytest.raises(f.SparkserveNetError, match="no usable route"):
        f.ip_route_get("unreachable 192.168.100.11 uid 0")


def test_container_host_record() -> None:
    """The cluster molecule scenario records plain netdev names (eth0/eth1) the same way."""
    ports = f.ibdev2netdev("roce0 port 1 ==> eth0 (Up)\nroce1 port 1 ==> eth1 (Up)\n")
    route = f.ip_route_get("172.30.0.3 dev eth1 src 172.30.0.2 uid 0 \n    cache \n")
    assert f.cluster_net_env(f.cluster_port(ports, route, "172.30.0.3"))["NCCL_IB_HCA"] == "=roce1:1"


@pytest.mark.parametrize(
    ("name", "cc", "driver"),
    [
        ("gb10", "12.1", "580.95.05"),
        ("h100", "9.0", "580.82.07"),
        ("rtx6000-old-driver", "12.0", "575.64.03"),
    ],
)
def test_nvidia_smi(name: str, cc: str, driver: str) -> None:
    (gpu,) = f.nvidia_smi_gpus((DATA / "nvidia-smi" / f"{name}.csv").read_text())
    assert (gpu["compute_cap"], gpu["driver"]) == (cc, driver)


def test_nvidia_smi_error_text() -> None:
    with pytest.raises(f.SparkserveFilterError, match="unexpected nvidia-smi line"):
        f.nvidia_smi_gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_envfile_matches_the_profiles() -> None:
    env = f.envfile((ROOT / "profiles/spark.env").read_text())
    assert env["SPARKSERVE_TARGET"] == "spark"
    assert env["MODEL"] == "openai/gpt-oss-120b"
    assert f.envfile('A="x y"\nexport B=2 # note\n# c\n\n') == {"A": "x y", "B": "2"}
    with pytest.raises(f.SparkserveFilterError, match="line 1"):
        f.envfile("not a line\n")


ENVFILE_CASES = tomllib.loads((ROOT / "tests/data/envfile-cases.toml").read_text())["case"]


@pytest.mark.parametrize("case", ENVFILE_CASES, ids=lambda c: c["name"])
def test_envfile_reads_compose_env_files_as_compose_does(case: dict[str, Any]) -> None:
    """The cases that tests/deploy/test_envfile_compose.py checks against docker compose itself."""
    if "refuse" in case:
        with pytest.raises(f.SparkserveFilterError, match=re.escape(case["refuse"])):
            f.envfile(case["text"], case.get("lookup"))
    else:
        assert f.envfile(case["text"], case.get("lookup")) == case["expect"]


@pytest.mark.parametrize(("log", "cause"), [
    # the entrypoint's refusal, under its warnings
    ("sparkserve image\nsparkserve: warning: passed through unchecked: TMPDIR\n"
     "sparkserve: refusing to start: no GPU: nvidia-smi found none\n",
     "sparkserve: refusing to start: no GPU: nvidia-smi found none"),
    # vLLM's engine failed: its own exception, not the front end's pointer to it
    ("(EngineCore_DP0 pid=212) Traceback (most recent call last):\n"
     "(EngineCore_DP0 pid=212) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
     "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.\n",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'lm_head'\n",
     "KeyError: 'lm_head'"),
    ("INFO 11-27 loading\nKilled\n", "Killed"),  # no exception: the last line
    ("", "(the log is empty)"),
])
def test_the_cause_of_a_failed_start_is_one_line(log: str, cause: str) -> None:
    assert f.start_cause(log.splitlines()) == cause
