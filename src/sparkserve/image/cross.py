"""Build FlashInfer JIT modules for another CPU arch than the build machine's.

A module is one shared library: device code (cubins for the CUDA archs, made by cicc and ptxas, which do
not depend on the host CPU) inside host code (the launchers, FlashInfer's bindings). For an arm64 image
built on an amd64 machine, nvcc runs natively and the host code goes to a cross compiler: FlashInfer passes
`CC` to nvcc as `-ccbin` and compiles and links its C++ with `CXX`; the link needs the target's libcudart
and a libcuda stub (`FLASHINFER_EXTRA_LDFLAGS`). Every library is checked to be of the target arch: a
module built for the wrong CPU would only fail when the server first loads it.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError

# Docker's arch names -> (ELF e_machine, GNU triplet of Debian's cross compilers, Debian's package).
ARCHS: dict[str, tuple[int, str, str]] = {
    "amd64": (62, "x86_64-linux-gnu", "g++-x86-64-linux-gnu"),
    "arm64": (183, "aarch64-linux-gnu", "g++-aarch64-linux-gnu"),
}
_MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_ELF_MAGIC = b"\x7fELF"


def host_arch() -> str:
    """This machine's arch in Docker's words (amd64, arm64)."""
    machine = platform.machine().lower()
    if machine not in _MACHINES:
        raise SparkserveError(f"unknown machine {machine!r}: builds run on {', '.join(sorted(ARCHS))}")
    return _MACHINES[machine]


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise SparkserveError(f"unknown target arch {arch!r}: one of {', '.join(sorted(ARCHS))}")
    return arch


def elf_arch(path: Path) -> str:
    """The arch of an ELF file (Docker's words), from its header; 'e_machine N' for one not listed."""
    with path.open("rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != _ELF_MAGIC:
        raise SparkserveError(f"{path} is not an ELF file")
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    for name, (number, _, _) in ARCHS.items():
        if number == machine:
            return name
    return f"e_machine {machine}"


@dataclass(frozen=True)
class Toolchain:
    """How host code is compiled for `target` on this machine."""

    host: str
    target: str
    compiler: str  # the C++ compiler of the host code (nvcc's -ccbin, FlashInfer's CXX)
    link_dir: str | None  # where the target's libcudart.so and libcuda.so stub are (cross only)

    @property
    def cross(self) -> bool:
        return self.host != self.target

    def environment(self) -> dict[str, str]:
        """The variables FlashInfer's build reads; nothing for a native build."""
        if not self.cross:
            return {}
        assert self.link_dir is not None
        return {"CC": self.compiler, "CXX": self.compiler, "FLASHINFER_EXTRA_LDFLAGS": f"-L{self.link_dir}"}


def toolchain(target: str, link_dir: Path | None) -> Toolchain:
    """The toolchain for `target` here; fails, saying what to install, when a cross build lacks one."""
    host = host_arch()
    check_arch(target)
    if target == host:
        return Toolchain(host, target, os.environ.get("CXX", "c++"), None)
    _, triplet, package = ARCHS[target]
    compiler = f"{triplet}-g++"
    if shutil.which(compiler) is None:
        raise SparkserveError(f"building {target} modules on an {host} machine needs the cross compiler "
                              f"{compiler}: apt-get install {package}")
    if link_dir is None:
        raise SparkserveError(f"building {target} modules on an {host} machine needs --cross-link-dir: a "
                              f"folder with the {target} libcudart.so and a libcuda.so stub")
    for lib in ("libcudart.so", "libcuda.so"):
        found = link_dir / lib
        if not found.exists():
            raise SparkserveError(f"{found} is missing: the cross link folder needs the {target} "
                                  "libcudart.so and a libcuda.so stub (see the Dockerfile's jit-cross-host)")
        if elf_arch(found.resolve()) != target:
            raise SparkserveError(f"{found} is a {elf_arch(found.resolve())} library, not {target}")
    return Toolchain(host, target, compiler, str(link_dir))


def check_library(path: Path, target: str) -> None:
    """Refuse a module library that is not of the target arch."""
    arch = elf_arch(path)
    if arch != target:
        raise SparkserveError(f"{path} is an {arch} library, not {target}: it would not load where it runs "
                              "(was the host code compiled by the wrong compiler?)")
