"""Container healthcheck: GET /health on the server's port; exit 0 only on HTTP 200. The port and the
listen address may come from the profile file (the entrypoint reads it too: serving/profiles.py). The
entrypoint's watchdog (serving/supervise.py) asks the same URL.

A cluster's worker (node rank > 0) runs no API server, so it has no /health: it is healthy while its
headless vLLM runs. Whether the head still answers is the worker entrypoint's watchdog's question (the
head's rendezvous port, a tcp:// probe), not the healthcheck's: ansible's cluster.yml waits for the
worker to turn healthy before it starts the head.
"""

from __future__ import annotations

import http.client
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import cluster, profiles, vllmconfig


def url(env: Mapping[str, str]) -> str:
    """The server's /health as seen from inside the container."""
    port = env.get("SPARKSERVE_PORT", "8000")
    listen = env.get("SPARKSERVE_LISTEN", "0.0.0.0")
    host = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/health"


def probe(address: str, timeout: float) -> bool:
    """http://: True only for an HTTP 200 within `timeout` seconds, never through a proxy (an HTTP_PROXY in
    the container's environment must not decide whether the local server is up). tcp://HOST:PORT: True when
    a connection is accepted (nothing is sent; it is closed at once)."""
    if address.startswith("tcp://"):
        return _connects(address, timeout)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(address, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return False


def _connects(address: str, timeout: float) -> bool:
    parts = urllib.parse.urlsplit(address)
    try:
        if parts.hostname is None or parts.port is None:
            return False
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def is_worker(env: Mapping[str, str]) -> bool:
    """The environment is a cluster worker's (node rank > 0), read as the entrypoint reads the profile."""
    try:
        return cluster.is_worker(int(env.get("SPARKSERVE_NNODES", "1")),
                                 int(env.get("SPARKSERVE_NODE_RANK", "0")))
    except ValueError:
        return False  # a profile the entrypoint refuses: nothing runs


def headless_vllm_runs(proc: Path = Path("/proc")) -> bool:
    """Some process here is vLLM's headless `serve` (the worker's command line: serving/flags.py)."""
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # ended while it was read
        if vllmconfig.HEADLESS.encode() in args and vllmconfig.CLI_MODULE.encode() in args:
            return True
    return False


def main() -> int:
    try:
        root = profiles.entrypoint_root(os.environ)
        env = profiles.container_env(os.environ, root).env
    except SparkserveError:
        env = dict(os.environ)  # the entrypoint refused this profile: nothing listens, the check fails
    if is_worker(env):
        return 0 if headless_vllm_runs() else 1
    return 0 if probe(url(env), timeout=8) else 1


if __name__ == "__main__":
    sys.exit(main())
