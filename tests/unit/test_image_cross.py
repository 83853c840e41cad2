"""The cross build of JIT modules for another CPU arch (src/sparkserve/image/cross.py) and the checks that
hold it to the arch it claims (ELF header), on real ELF files where the machine has the compilers."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.image import cross


def elf_header(machine: int, little: bool = True) -> bytes:
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4] = 2  # 64-bit
    head[5] = 1 if little else 2
    head[18:20] = machine.to_bytes(2, "little" if little else "big")
    return bytes(head)


@pytest.mark.parametrize(("machine", "arch"), [(62, "amd64"), (183, "arm64"), (40, "e_machine 40")])
def test_elf_arch_reads_the_machine_field(tmp_path: Path, machine: int, arch: str) -> None:
    f = tmp_path / "lib.so"
    f.write_bytes(elf_header(machine))
    assert cross.elf_arch(f) == arch


def test_elf_arch_refuses_a_file_that_is_no_elf(tmp_path: Path) -> None:
    f = tmp_path / "lib.so"
    f.write_text("#!/bin/sh\n")
    with pytest.raises(SparkserveError, match="not an ELF"):
        cross.elf_arch(f)


def test_a_module_of_the_wrong_arch_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "mod.so"
    f.write_bytes(elf_header(62))
    cross.check_library(f, "amd64")
    with pytest.raises(SparkserveError, match="is an amd64 library, not arm64"):
        cross.check_library(f, "arm64")


def test_a_native_build_changes_no_environment() -> None:
    tools = cross.toolchain(cross.host_arch(), None)
    assert not tools.cross and tools.environment() == {}


def other_arch() -> str:
    return "arm64" if cross.host_arch() == "amd64" else "amd64"


def test_a_cross_build_without_its_compiler_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    target = other_arch()
    with pytest.raises(SparkserveError, match=re.escape(f"apt-get install {cross.ARCHS[target][2]}")):
        cross.toolchain(target, tmp_path)


def test_a_cross_build_needs_the_targets_link_libraries(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    target = other_arch()
    with pytest.raises(SparkserveError, match="--cross-link-dir"):
        cross.toolchain(target, None)
    with pytest.raises(SparkserveError, match=re.escape("libcudart.so is missing")):
        cross.toolchain(target, tmp_path)
    # libraries of the build machine's arch in the link folder: refused
    here = {v[0]: k for k, v in cross.ARCHS.items()}
    number = next(n for n, a in here.items() if a == cross.host_arch())
    for lib in ("libcudart.so", "libcuda.so"):
        (tmp_path / lib).write_bytes(elf_header(number))
    with pytest.raises(SparkserveError, match=re.escape(f"is a {cross.host_arch()} library, not {target}")):
        cross.toolchain(target, tmp_path)
    for lib in ("libcudart.so", "libcuda.so"):
        (tmp_path / lib).write_bytes(elf_header(cross.ARCHS[target][0]))
    tools = cross.toolchain(target, tmp_path)
    env = tools.environment()
    compiler = f"{cross.ARCHS[target][1]}-g++"
    assert env == {"CC": compiler, "CXX": compiler, "FLASHINFER_EXTRA_LDFLAGS": f"-L{tmp_path}"}


def test_unknown_target_arch_is_refused() -> None:
    with pytest.raises(SparkserveError, match="unknown target arch 'riscv64'"):
        cross.toolchain("riscv64", None)


def test_a_lock_release_without_a_wheel_for_its_platform_is_named(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """uv's dry run refuses it; the check turns uv's words into one line naming the release."""
    import subprocess

    from sparkserve.supply import lock

    stderr = ("  x No solution found when resolving dependencies:\n"
              "  cause: Because intel-cmplr-lib-ur==2024.2.1 has no wheels with a matching platform tag "
              "(e.g., "
              "`manylinux_2_34_aarch64`) and you require intel-cmplr-lib-ur==2024.2.1, we can conclude that "
              "your requirements are unsatisfiable.\n\n"
              "hint: Wheels are available for `intel-cmplr-lib-ur` (v2024.2.1) on the following platforms: "
              "`manylinux1_x86_64`, `win_amd64`\n")
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", stderr)

    monkeypatch.setattr(lock.subprocess, "run", fake_run)
    problems = lock.wheel_problems(tmp_path / "lock.txt", "aarch64-manylinux_2_34", "3.13",
                                   "https://pypi.org/simple")
    assert problems == [f"{tmp_path / 'lock.txt'}: intel-cmplr-lib-ur==2024.2.1 has no wheel for "
                        "aarch64-manylinux_2_34 (its wheels: `manylinux1_x86_64`, `win_amd64`)"]
    cmd = calls[0]
    assert "--dry-run" in cmd and "--only-binary" in cmd and "--require-hashes" in cmd
    assert cmd[cmd.index("--python-platform") + 1] == "aarch64-manylinux_2_34"
