"""Inside a serving container: is the server offline for real? Its process runs with HF_HUB_OFFLINE=1 and
the container reaches nothing outside (the CPU compose test runs serve with network_mode: none)."""

from __future__ import annotations

import socket
from pathlib import Path

from sparkserve.errors import SparkserveError

PROBE = ("huggingface.co", 443)


def server_environ(proc: Path = Path("/proc"),
                   marker: bytes = b"vllm.entrypoints.openai.api_server") -> dict[str, str]:
    """The environment of the vLLM server process (the entrypoint exec'd it)."""
    for pid in sorted(p for p in proc.iterdir() if p.name.isdigit()):
        try:
            if marker in (pid / "cmdline").read_bytes():
                raw = (pid / "environ").read_bytes().decode(errors="replace")
                return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
        except OSError:
            continue
    raise SparkserveError(f"no process running {marker.decode()}")


def check(proc: Path = Path("/proc"), probe: tuple[str, int] = PROBE) -> str:
    env = server_environ(proc)
    if env.get("HF_HUB_OFFLINE") != "1":
        raise SparkserveError(f"the server runs with HF_HUB_OFFLINE={env.get('HF_HUB_OFFLINE')!r}, not 1")
    try:
        socket.create_connection(probe, timeout=5).close()
    except OSError as exc:
        return f"offline: HF_HUB_OFFLINE=1 in the server's environment; {probe[0]} unreachable ({exc})"
    raise SparkserveError(f"the container reached {probe[0]}:{probe[1]}: it has a network")
