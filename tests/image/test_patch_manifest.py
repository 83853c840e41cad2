"""The image's patch manifest lists every patch of the series it was built from, in order, with the
patch files' sha256: what `patches apply --site` wrote in the `patched` stage."""

from __future__ import annotations

import os
from pathlib import Path

from sparkserve.serving.banner import site_packages
from sparkserve.supply import pins
from sparkserve.supply.patches import manifest
from sparkserve.supply.patches.series import load_series


def test_manifest_lists_the_whole_series() -> None:
    p = pins.load(Path(os.environ.get("SPARKSERVE_ROOT", "/opt/sparkserve")))
    site = site_packages()
    assert site is not None, "vllm is not importable in this image"
    got = manifest.read(site / manifest.SITE_MANIFEST)
    for name in p.upstreams:
        want = [(x.id, x.sha256) for x in load_series(p.root, name)]
        entries = got.get(name, {}).get("patches", [])
        have = [(e["id"], e["sha256"]) for e in entries] if isinstance(entries, list) else []
        assert have == want, f"{name}: the image has {have}, the series has {want}"
        assert want, f"{name}: empty series"
