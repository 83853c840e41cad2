"""Build the listed FlashInfer JIT modules into FLASHINFER_WORKSPACE_BASE without a GPU."""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.image import modules as mlist
from sparkserve.image.specs import jit_spec
from sparkserve.progress import say

BUILD_INFO = "sparkserve-build-info.json"


def check_environment() -> str:
    """The arch list; fail early, naming the variable, when the build cannot be offline and GPU-free."""
    archs = os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "").strip()
    if not archs:
        raise SparkserveError("FLASHINFER_CUDA_ARCH_LIST is not set: without it FlashInfer asks the GPU "
                              "which arch to build for (e.g. FLASHINFER_CUDA_ARCH_LIST='12.1a 12.0f')")
    cuda_home = os.environ.get("CUDA_HOME", "")
    if not cuda_home or not (Path(cuda_home) / "bin" / "nvcc").is_file():
        raise SparkserveError(f"CUDA_HOME={cuda_home!r} has no bin/nvcc: point it at the nvidia/cu13 folder "
                              "of the environment's site-packages (PyPI nvcc wheels)")
    return archs


def workspace() -> Path:
    return Path(importlib.import_module("flashinfer.jit.env").FLASHINFER_WORKSPACE_DIR)


def library(spec: Any) -> Path:
    return Path(spec.jit_library_path)


def prewarm(list_path: Path, which: str, build_info: Path | None,
            dry_run: bool = False, record: dict[str, str] | None = None, *,
            names: list[str] | None = None) -> list[dict[str, object]]:
    archs = check_environment()
    chosen, left_out = mlist.select(mlist.load(list_path), which, names)
    picked = f"named {', '.join(names)}" if names else f"set {which}"
    say(f"jit prewarm: {len(chosen)} module(s) of {list_path} ({picked}) for "
        f"FLASHINFER_CUDA_ARCH_LIST={archs!r}")
    for m in left_out:
        say(f"  left out of set {which}: {m.name} ({m.ci_skip_reason})")
    built: list[dict[str, object]] = []
    total = time.monotonic()
    for i, m in enumerate(chosen, 1):
        t0 = time.monotonic()
        spec = jit_spec(m)
        if dry_run:
            print(f"[{i}/{len(chosen)}] {m.name}: would build {spec.name}")
            continue
        say(f"[{i}/{len(chosen)}] {m.name}: building {spec.name}")
        try:
            spec.build()
        except Exception as exc:  # flashinfer raises its own error types; report which module failed
            raise SparkserveError(f"JIT module {m.name!r} ({spec.name}) did not compile: {exc}") from exc
        so = library(spec)
        if not so.is_file():
            raise SparkserveError(f"JIT module {m.name!r}: the build left no {so}")
        dt = time.monotonic() - t0
        say(f"[{i}/{len(chosen)}] {m.name}: ok in {dt:.0f}s ({so.stat().st_size / 2**20:.1f} MiB)")
        built.append({"name": m.name, "kind": m.kind, "uri": spec.name, "library": str(so),
                      "seconds": round(dt, 1)})
    if dry_run:
        return built
    say(f"jit prewarm: {len(built)} module(s) in {time.monotonic() - total:.0f}s")
    if build_info is not None:
        build_info.parent.mkdir(parents=True, exist_ok=True)
        build_info.write_text(json.dumps({
            "flashinfer_cuda_arch_list": archs,
            "jit_set": which,
            **({"modules": list(names)} if names else {}),
            "workspace": str(workspace()),
            "built": built,
            "left_out": [{"name": m.name, "reason": m.ci_skip_reason} for m in left_out],
            "build": record or {},
        }, indent=2) + "\n")
    return built
