"""Which GPU is visible, and can the image's prebuilt kernels run on it? (CUDA driver API via ctypes:
no torch import, answers in milliseconds, works when no GPU or no driver is present.)"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

_CC_MAJOR, _CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)$")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    major: int
    minor: int

    @property
    def cc(self) -> str:
        return f"{self.major}.{self.minor}"


class NoGpu(Exception):
    """No CUDA driver or no device: the reason, for the user."""


def parse_arch(arch: str) -> tuple[int, int, str]:
    m = _ARCH.match(arch.strip())
    if not m:
        raise ValueError(f"not a CUDA arch like 12.1a or 12.0f: {arch!r}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def runs_on(arch: str, major: int, minor: int) -> bool:
    """Whether cubins built for `arch` (FLASHINFER_CUDA_ARCH_LIST form) run on compute capability major.minor.
    `a` (arch-specific) runs on exactly that CC; `f` (family) and plain on the same major with minor >= it."""
    a_major, a_minor, suffix = parse_arch(arch)
    if suffix == "a":
        return (a_major, a_minor) == (major, minor)
    return a_major == major and minor >= a_minor


def compatible(arch_list: str, gpu: Gpu) -> list[str]:
    return [a for a in arch_list.split() if runs_on(a, gpu.major, gpu.minor)]


def visible_gpus() -> list[Gpu]:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise NoGpu(f"no NVIDIA driver in the container (libcuda.so.1: {exc})") from None
    rc = cuda.cuInit(0)
    if rc != 0:
        raise NoGpu(f"the CUDA driver did not initialise (cuInit error {rc}); no usable GPU")
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise NoGpu("the CUDA driver sees no GPU")
    gpus = []
    for i in range(count.value):
        dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev)
        cuda.cuDeviceGetName(name, 256, dev)
        gpus.append(Gpu(i, name.value.decode(errors="replace"), major.value, minor.value))
    return gpus
