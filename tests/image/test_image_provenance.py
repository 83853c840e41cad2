"""The image knows what it is: its patch manifest lists the whole series it was built from, with the
patch files' sha256 (what `patches apply --site` wrote), and its build arguments, commit and pins."""

from __future__ import annotations

import os
from pathlib import Path

from sparkserve.image.cross import elf_arch
from sparkserve.serving.banner import site_packages
from sparkserve.serving.provenance import image_info
from sparkserve.supply import pins
from sparkserve.supply.patches import manifest
from sparkserve.supply.patches.series import load_series


def test_the_pinned_stack_imports() -> None:
    import flashinfer
    import torch
    import vllm

    p = pins.load(Path(os.environ.get("SPARKSERVE_ROOT", "/opt/sparkserve")))
    print(f"torch {torch.__version__}, vllm {vllm.__version__}, flashinfer {flashinfer.__version__}")
    assert vllm.__version__ == p.upstreams["vllm"].version
    assert flashinfer.__version__ == p.upstreams["flashinfer"].version
    assert torch.__version__.split("+")[0] == p.torch_version


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


def test_the_image_says_how_it_was_built() -> None:
    """The image's provenance as the product reads it (what the lab's run record embeds too): the build
    arguments, the commit and the pins."""
    info = image_info()
    assert info is not None, "no build info in this image"
    build = info["build_info"]["build"]
    assert build["base_image"] and build["target_arch"] in ("amd64", "arm64"), build
    assert info["build_info"]["flashinfer_cuda_arch_list"]
    assert info["commit"] and info["commit"] != "unknown", "the image was built without SPARKSERVE_COMMIT"
    assert info["pins"]["upstreams"]["vllm"]["version"] == "0.33.0"


def test_the_image_is_of_the_arch_it_was_built_for() -> None:
    """An arm64 image (built on an amd64 machine, its JIT host code cross-compiled) runs as linux/arm64
    and its prewarmed modules are arm64 libraries; likewise for amd64."""
    info = image_info()
    assert info is not None, "no build info in this image"
    target = info["build_info"]["build"]["target_arch"]
    assert info["platform"] == f"linux/{target}", (info["platform"], target)
    assert info["build_info"]["cpu_arch"] == target
    for module in info["build_info"]["built"]:
        assert elf_arch(Path(module["library"])) == target, module["name"]
