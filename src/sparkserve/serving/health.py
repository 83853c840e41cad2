"""Container healthcheck: GET /health on the server's port; exit 0 only on HTTP 200. The port and the
listen address may come from the profile file (the entrypoint reads it too: serving/profiles.py)."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import profiles


def main() -> int:
    try:
        root = Path(os.environ.get("SPARKSERVE_ROOT", "/opt/sparkserve"))
        env = profiles.container_env(os.environ, root).env
    except SparkserveError:
        env = dict(os.environ)  # the entrypoint refused this profile: nothing listens, the check fails
    port = env.get("SPARKSERVE_PORT", "8000")
    listen = env.get("SPARKSERVE_LISTEN", "0.0.0.0")
    host = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    if ":" in host:
        host = f"[{host}]"
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=8) as resp:
            return 0 if resp.status == 200 else 1
    except (urllib.error.URLError, OSError):
        return 1


if __name__ == "__main__":
    sys.exit(main())
