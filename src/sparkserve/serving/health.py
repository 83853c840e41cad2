"""Container healthcheck: GET /health on the server's port; exit 0 only on HTTP 200. The port and the
listen address may come from the profile file (the entrypoint reads it too: serving/profiles.py). The
entrypoint's watchdog (serving/supervise.py) asks the same URL."""

from __future__ import annotations

import http.client
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping

from sparkserve.errors import SparkserveError
from sparkserve.serving import profiles


def url(env: Mapping[str, str]) -> str:
    """The server's /health as seen from inside the container."""
    port = env.get("SPARKSERVE_PORT", "8000")
    listen = env.get("SPARKSERVE_LISTEN", "0.0.0.0")
    host = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/health"


def probe(address: str, timeout: float) -> bool:
    """True only for an HTTP 200 within `timeout` seconds. Never through a proxy: an HTTP_PROXY in the
    container's environment must not decide whether the local server is up."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(address, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return False


def main() -> int:
    try:
        root = profiles.entrypoint_root(os.environ)
        env = profiles.container_env(os.environ, root).env
    except SparkserveError:
        env = dict(os.environ)  # the entrypoint refused this profile: nothing listens, the check fails
    return 0 if probe(url(env), timeout=8) else 1


if __name__ == "__main__":
    sys.exit(main())
