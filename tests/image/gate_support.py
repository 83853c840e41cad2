"""What the gate tests of tests/image share: a platform of a fixed kind without a device, and a Python of
its own for Triton's interpreter or its compiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vllm.platforms.interface import Platform, PlatformEnum

from sparkserve.serving.switches import COMPILED_FOR

HERE = Path(__file__).resolve().parent
# The archs (sm_XY) the series' kernels compile for here: the GPUs the GPU gate lets them run on.
ARCHS = tuple(10 * major + minor for major, minor in COMPILED_FOR)


def fake_platform(enum: PlatformEnum) -> Platform:
    """The real Platform helpers (is_cuda, ...) over a fixed kind, no device."""
    name = enum.name.lower()
    return type(f"Fake{enum.name}Platform", (Platform,), {
        "_enum": enum, "device_type": name, "device_name": name,
        "get_device_capability": classmethod(lambda cls, device_id=0: None)})()


def run_json(script: str, interpret: bool, *args: str) -> Any:
    """SCRIPT in a Python of its own, which can import this folder's modules; what it printed last, as
    JSON. CUDA_VISIBLE_DEVICES="" keeps the real Triton without a driver; TRITON_INTERPRET=1 runs kernels
    on the CPU, unset leaves Triton's compiler."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_in_registers(kernels: list[dict[str, Any]], block_ms: tuple[int, ...]) -> None:
    """KERNELS (cubins.facts of a compile script, with "arch" and "block_m") cover ARCHS at each of
    BLOCK_MS, each a cubin for its architecture that keeps everything in registers."""
    assert [(k["arch"], k["block_m"]) for k in kernels] == [(a, m) for a in ARCHS for m in block_ms]
    for k in kernels:
        assert f".sm_{k['arch']}" in k["elf"], k  # a cubin for that architecture
        assert k["LOCAL"] == 0 and k["STACK"] == 0, k  # no spills
        assert 0 < k["REG"] <= 255, k


def assert_compile_factor(name: str, type_checked: set[str]) -> None:
    """NAME is one of vLLM's declared variables and, set, part of torch.compile's cache key."""
    import vllm.envs as envs

    assert name in envs.environment_variables
    assert name in type_checked
    assert envs.compile_factors().get(name) is True
