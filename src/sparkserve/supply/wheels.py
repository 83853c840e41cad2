"""Install the pinned vllm and flashinfer wheels (hash-checked, no dependencies) into a folder.

This is what `patches check` needs: the files of the installed packages, not a working CUDA stack.
"""

from __future__ import annotations

import platform as host_platform
import subprocess
import tempfile
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply.lock import requirement_block
from sparkserve.supply.pins import Pins
from sparkserve.supply.uvtool import uv_bin


def host_lock_platform() -> str:
    return {"x86_64": "linux-amd64", "aarch64": "linux-arm64"}.get(
        host_platform.machine(), "linux-amd64"
    )


def install(pins: Pins, target: Path, platform: str | None = None) -> Path:
    platform = platform or host_lock_platform()
    try:
        lp = pins.lock_platforms[platform]
    except KeyError:
        raise SparkserveError(f"no lock for platform {platform!r}") from None
    lock_text = (pins.root / lp.file).read_text()
    reqs = "".join(requirement_block(lock_text, u.distribution) for u in pins.upstreams.values())
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "wheels.txt"
        req.write_text(reqs)
        say(f"installing {', '.join(u.distribution for u in pins.upstreams.values())} "
            f"({platform}, hash-checked, --no-deps) into {target}")
        cmd = [
            # copy, not hard links into uv's cache: `patches apply --site` then edits these files
            uv_bin(), "pip", "install", "--no-config", "--no-deps", "--require-hashes", "--link-mode", "copy",
            "--only-binary", ":all:", "--index-url", pins.index_url,
            "--python-platform", lp.uv_platform, "--python-version", pins.python,
            "--target", str(target), "-r", str(req),
        ]
        proc = subprocess.run(cmd, check=False)
        if proc.returncode != 0:
            raise SparkserveError(f"installing the pinned wheels into {target} failed")
    return target
