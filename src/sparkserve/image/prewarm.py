"""Build the listed FlashInfer JIT modules into FLASHINFER_WORKSPACE_BASE without a GPU."""

from __future__ import annotations

import importlib
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.image import cross
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


def _children_cpu() -> float:
    """User + system seconds of the finished compiler processes (what a module's build costs, however
    busy the machine or however many cores it has)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def prewarm(list_path: Path, which: str, build_info: Path | None,
            dry_run: bool = False, record: dict[str, str] | None = None, *,
            names: list[str] | None = None, target_arch: str | None = None,
            cross_link_dir: Path | None = None) -> list[dict[str, object]]:
    """Build the chosen modules. target_arch: the CPU arch of the libraries (default: this machine's);
    another arch's are built with its cross compiler and linked against cross_link_dir."""
    archs = check_environment()
    chosen, left_out = mlist.select(mlist.load(list_path), which, names)
    tools = cross.toolchain(target_arch or cross.host_arch(), cross_link_dir)
    os.environ.update(tools.environment())
    picked = f"named {', '.join(names)}" if names else f"set {which}"
    say(f"jit prewarm: {len(chosen)} module(s) of {list_path} ({picked}) for "
        f"FLASHINFER_CUDA_ARCH_LIST={archs!r}, host code for {tools.target} by {tools.compiler}"
        + (f" (cross, on {tools.host})" if tools.cross else ""))
    for m in left_out:
        say(f"  left out of set {which}: {m.name} ({m.ci_skip_reason})")
    built: list[dict[str, object]] = []
    total = time.monotonic()
    for i, m in enumerate(chosen, 1):
        t0, cpu0 = time.monotonic(), _children_cpu()
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
        cross.check_library(so, tools.target)
        dt, cpu = time.monotonic() - t0, _children_cpu() - cpu0
        say(f"[{i}/{len(chosen)}] {m.name}: ok in {dt:.0f}s, {cpu:.0f} CPU s "
            f"({so.stat().st_size / 2**20:.1f} MiB)")
        built.append({"name": m.name, "kind": m.kind, "uri": spec.name, "library": str(so),
                      "seconds": round(dt, 1), "cpu_seconds": round(cpu, 1)})
    if dry_run:
        return built
    say(f"jit prewarm: {len(built)} module(s) in {time.monotonic() - total:.0f}s, "
        f"{sum(float(str(b['cpu_seconds'])) for b in built):.0f} CPU s")
    if build_info is not None:
        build_info.parent.mkdir(parents=True, exist_ok=True)
        build_info.write_text(json.dumps({
            "flashinfer_cuda_arch_list": archs,
            "cpu_arch": tools.target,
            "build_machine_arch": tools.host,
            "host_compiler": tools.compiler,
            "jit_set": which,
            **({"modules": list(names)} if names else {}),
            "workspace": str(workspace()),
            "built": built,
            "left_out": [{"name": m.name, "reason": m.ci_skip_reason} for m in left_out],
            "build": record or {},
        }, indent=2) + "\n")
    return built
