"""Filters of the sparkserve roles: parse what the hosts report and pick the two-node network settings.

Pure functions on text, so they are unit-tested on recorded outputs (tests/ansible/test_filters.py) and
run on the controller. Every error says what was found and what to do.

  ibdev2netdev           text of `ibdev2netdev`          -> [{ibdev, port, netdev, state}]
  ip_route_get           text of `ip -o route get ADDR`  -> {dst, dev, src, via}
  cluster_port           ports + route + peer            -> the ConnectX port that is up and carries the peer
  cluster_net_env        that port                       -> NCCL/GLOO/TP/UCX variables naming only it
  nvidia_smi_gpus        nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader
  envfile                text of a compose env file      -> {KEY: value}
  docker_env_args        {KEY: value}                    -> ["--env=KEY=value", ...]
  start_cause            the log lines of a server that exited at start -> the one line that says why
  provenance_record      a checkout's root -> the build it expects (src/sparkserve/provenance.py)
  provenance_pin_problem an image reference -> '' when pinned by digest, else what to do
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

try:  # on the controller inside Ansible; the unit tests import this file without Ansible
    from ansible.errors import AnsibleFilterError as _FilterError
except ImportError:  # pragma: no cover - exercised only without Ansible installed
    _FilterError = ValueError  # type: ignore[assignment,misc]


class SparkserveFilterError(_FilterError):  # type: ignore[misc,valid-type]
    """What a host reported cannot be used: the message says what was found and what to do."""


class SparkserveNetError(SparkserveFilterError):
    """The host's network cannot carry the two-node link as configured."""


_IBDEV = re.compile(
    r"^(?P<ibdev>\S+)\s+port\s+(?P<port>\d+)\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>[^)]*)\)\s*$"
)


def ibdev2netdev(text: str) -> list[dict[str, Any]]:
    """`ibdev2netdev` lines such as `rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)`."""
    ports = []
    for n, line in enumerate(str(text).splitlines(), 1):
        if not line.strip():
            continue
        m = _IBDEV.match(line.strip())
        if not m:
            raise SparkserveNetError(
                f"ibdev2netdev line {n} is not `IBDEV port N ==> NETDEV (State)`: {line!r}"
            )
        ports.append(
            {"ibdev": m["ibdev"], "port": int(m["port"]), "netdev": m["netdev"], "state": m["state"]}
        )
    return ports


def ip_route_get(text: str) -> dict[str, str]:
    """First line of `ip -o route get ADDR`: `ADDR [via GW] dev DEV [src SRC] ...`."""
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        raise SparkserveNetError("`ip route get` printed nothing: no route to the peer")
    words = lines[0].replace("\\", " ").split()
    out = {"dst": words[0], "dev": "", "src": "", "via": ""}
    for key in ("dev", "src", "via"):
        if key in words and words.index(key) + 1 < len(words):
            out[key] = words[words.index(key) + 1]
    if words[0] in ("unreachable", "prohibit", "blackhole") or not out["dev"]:
        raise SparkserveNetError(f"no usable route: {lines[0].strip()!r}")
    return out


def cluster_port(ports: list[dict[str, Any]], route: dict[str, str], peer: str) -> dict[str, Any]:
    """The ConnectX port whose netdev carries the route to `peer`; it must be up.

    Only this port is used: naming a port that is down or cabled elsewhere in NCCL_IB_HCA is the most
    reported two-node failure (`ibv_modify_qp` error 110).
    """
    listing = ", ".join(f"{p['ibdev']}:{p['port']}={p['netdev']} ({p['state']})" for p in ports) or "none"
    if not ports:
        raise SparkserveNetError(
            "ibdev2netdev lists no RDMA port: install the MLNX OFED / DOCA host tools and check that the "
            "ConnectX-7 driver (mlx5_core) is loaded"
        )
    dev = route.get("dev", "")
    match = [p for p in ports if p["netdev"] == dev]
    if not match:
        raise SparkserveNetError(
            f"the route to the peer {peer} leaves through {dev!r}, which is not a ConnectX port "
            f"(ibdev2netdev: {listing}): the peer's address must be on the CX-7 link; give both hosts an "
            "address in one subnet on the cabled CX-7 port, or set cluster_address to the peer's CX-7 "
            "address"
        )
    port = match[0]
    if port["state"].lower() != "up":
        raise SparkserveNetError(
            f"the route to the peer {peer} uses {port['netdev']} ({port['ibdev']} port {port['port']}), "
            f"which is {port['state']}: check the cable on that port, or move the address to the port that "
            f"is up (ibdev2netdev: {listing})"
        )
    if route.get("via"):
        raise SparkserveNetError(
            f"the peer {peer} is reached through the gateway {route['via']} on {dev}, not directly on the "
            "CX-7 link: put both hosts in one subnet on the cabled port"
        )
    return {**port, "src": route.get("src", "")}


def cluster_net_env(port: dict[str, Any]) -> dict[str, str]:
    """Environment of the serving and all-reduce containers for that one port."""
    netdev = str(port["netdev"])
    return {
        "NCCL_SOCKET_IFNAME": netdev,
        "GLOO_SOCKET_IFNAME": netdev,
        "TP_SOCKET_IFNAME": netdev,
        "UCX_NET_DEVICES": netdev,
        # `=` makes NCCL match the name exactly (no prefix match on rocep1s0f1x); only the active port.
        "NCCL_IB_HCA": f"={port['ibdev']}:{port['port']}",
    }


def nvidia_smi_gpus(text: str) -> list[dict[str, Any]]:
    """`index, name, compute_cap, driver_version` CSV lines (noheader)."""
    gpus = []
    for line in str(text).splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not re.match(r"^\d+\.\d+$", cells[2]):
            raise SparkserveFilterError(
                f"unexpected nvidia-smi line (want index, name, compute_cap, driver): {line!r}"
            )
        gpus.append({"index": int(cells[0]), "name": cells[1], "compute_cap": cells[2], "driver": cells[3]})
    return gpus


def envfile(text: str, lookup: dict[str, str] | None = None) -> dict[str, str]:
    """KEY=VALUE lines of a compose env file, read by the project's one env-file reader (compose's rules:
    src/sparkserve/serving/envfile.py, loaded from this checkout); `lookup` is compose's environment."""
    try:
        return dict(_envfile_module().parse(str(text), lookup))
    except ValueError as exc:
        raise SparkserveFilterError(f"env file {exc}") from None


def _envfile_module() -> Any:
    path = Path(__file__).resolve().parents[3] / "src" / "sparkserve" / "serving" / "envfile.py"
    spec = importlib.util.spec_from_file_location("sparkserve_envfile", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SparkserveFilterError(f"{path} is missing: run Ansible from a sparkserve checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def provenance_record(root: str) -> dict[str, Any]:
    """The build a checkout expects, by the project's one reader (src/sparkserve/provenance.py)."""
    module = _checkout_module(Path(root) / "src" / "sparkserve" / "provenance.py")
    try:
        return dict(module.record(Path(root)))
    except module.ProvenanceError as exc:
        raise SparkserveFilterError(f"{root}: {exc}") from None


def provenance_pin_problem(image: str) -> str:
    module = _checkout_module(_CHECKOUT / "src" / "sparkserve" / "provenance.py")
    return str(module.digest_refusal(str(image)))


_CHECKOUT = Path(__file__).resolve().parents[3]


def _checkout_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"sparkserve_{path.stem}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SparkserveFilterError(f"{path} is missing: run Ansible from a sparkserve checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docker_env_args(env: dict[str, Any], exclude: list[str] | None = None) -> list[str]:
    """`--env=KEY=VALUE` arguments for `docker run`, sorted, without the keys in `exclude`."""
    skip = set(exclude or [])
    return [f"--env={k}={v}" for k, v in sorted(env.items()) if k not in skip]


# The entrypoint's own refusal (`sparkserve: invalid serving profile: ...`), not its warnings.
_REFUSAL = re.compile(r"^sparkserve: (?!warning)")
# The last line of a Python traceback (`ValueError: ...`, `torch.OutOfMemoryError: ...`), as vLLM's
# processes print it, maybe behind their prefix (`(EngineCore_DP0 pid=42) `).
_EXCEPTION = re.compile(r"^(?:\(\S+ pid=\d+\) )?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)"
                        r"\b(?::.*)?)$")
# vLLM's front end ends with this after its engine failed; the engine's own exception above is the cause.
_NOT_THE_CAUSE = ("See root cause above",)


def start_cause(lines: list[str]) -> str:
    """Why a server exited at start, in one line, from its log (oldest first): the entrypoint's refusal,
    else the last exception that is not a pointer to another, else the last line."""
    text = [str(line).rstrip() for line in lines or [] if str(line).strip()]
    refusals = [line for line in text if _REFUSAL.match(line)]
    if refusals:
        return refusals[-1]
    causes = [m.group(1) for m in map(_EXCEPTION.match, text) if m]
    own = [c for c in causes if not any(p in c for p in _NOT_THE_CAUSE)]
    if own or causes:
        return (own or causes)[-1]
    return text[-1] if text else "(the log is empty)"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkserve_ibdev2netdev": ibdev2netdev,
            "sparkserve_ip_route_get": ip_route_get,
            "sparkserve_cluster_port": cluster_port,
            "sparkserve_cluster_net_env": cluster_net_env,
            "sparkserve_nvidia_smi_gpus": nvidia_smi_gpus,
            "sparkserve_envfile": envfile,
            "sparkserve_docker_env_args": docker_env_args,
            "sparkserve_start_cause": start_cause,
            "sparkserve_provenance_record": provenance_record,
            "sparkserve_provenance_pin_problem": provenance_pin_problem,
        }
