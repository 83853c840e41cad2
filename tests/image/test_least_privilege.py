"""The runtime image runs as its serving user, owns only its volumes' mount points, and loads the prewarmed
FlashInfer modules as AOT modules (so that the JIT workspace can live in the cache volume)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

from sparkserve.image import aotlinks
from sparkserve.serving import banner

SERVE_UID = 10001
VOLUMES = ("/var/lib/sparkserve", "/var/cache/sparkserve", "/data/huggingface")
BUILD_INFO = Path("/opt/jit-cache/sparkserve-build-info.json")


def test_the_image_runs_as_the_serving_user() -> None:
    assert os.getuid() == SERVE_UID and os.getgid() == SERVE_UID
    me = pwd.getpwuid(os.getuid())
    assert me.pw_name == "serve" and me.pw_shell == "/usr/sbin/nologin"


def test_the_volume_mount_points_belong_to_it_and_nothing_else_it_runs_does() -> None:
    for folder in VOLUMES:
        st = Path(folder).stat()
        assert (st.st_uid, st.st_gid) == (SERVE_UID, SERVE_UID), folder
    for folder in ("/opt/venv", "/opt/sparkserve", "/opt/jit-cache"):
        assert Path(folder).stat().st_uid == 0 and not os.access(folder, os.W_OK), folder


def test_every_prewarmed_module_loads_as_an_aot_module() -> None:
    site = banner.site_packages("flashinfer")
    assert site is not None
    built = json.loads(BUILD_INFO.read_text())["built"]
    good, dangling = aotlinks.linked(site)
    assert built and good == len(built) and dangling == []
    for m in built:
        link = aotlinks.aot_dir(site) / str(m["uri"]) / f"{m['uri']}.so"
        assert link.is_symlink() and link.resolve() == Path(str(m["library"])).resolve()


def test_the_jit_workspace_is_left_to_the_entrypoint() -> None:
    """Set here, it would win over the cache volume's folder (serving/caches.py) and point at the
    read-only prewarm."""
    assert "FLASHINFER_WORKSPACE_BASE" not in os.environ
