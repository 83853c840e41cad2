"""How the image this runs in was built, as the image itself records it: the JIT stage's build info (arch
list, JIT set, base image, target arch, the prebuilt modules), the commit it was built from (the build
argument SPARKSERVE_COMMIT, an ENV of the runtime stage) and the pins it carries. A read of what the image
already holds, nothing measured: what a deployment compares with its checkout's pins.toml, and what the
lab's run record (`sparkserve-lab metadata`) embeds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.image.cross import host_arch
from sparkserve.serving.banner import build_info
from sparkserve.supply import pins


def image_info() -> dict[str, Any] | None:
    """{build_info, commit, pins, platform}; None outside a sparkserve image (no build info)."""
    info = build_info()
    if not info:
        return None
    root = Path(os.environ.get("SPARKSERVE_ROOT", "/opt/sparkserve"))
    try:
        image_pins: dict[str, Any] | None = pins.load(root).record()
    except (OSError, SparkserveError):
        image_pins = None
    return {"build_info": info, "commit": os.environ.get("SPARKSERVE_COMMIT"), "pins": image_pins,
            # the image's platform as Docker names it: the arch this runs on (under emulation too)
            "platform": f"linux/{host_arch()}"}
