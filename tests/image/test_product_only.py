"""The serving image carries the product only: no module of the lab (lab/src/sparkserve_lab: levels 1.5
and 3-6, A/B, proofs, the run store) under /opt/sparkserve or in the venv, installed, linked or copied.
Where CI or compose run a lab verb in a container of this image they mount the checkout's lab/; this test
runs without it (scripts/ci/20-image.sh, 22-image-arm64.sh)."""

from __future__ import annotations

import os
import pkgutil
import sys
import sysconfig
from pathlib import Path

import pytest

LAB = "sparkserve_lab"
PRODUCT = "sparkserve"
ROOT = Path(os.environ.get("SPARKSERVE_ROOT", "/opt/sparkserve"))


def python_modules(top: Path) -> list[str]:
    """Every Python module file under `top` (sources, bytecode, extensions), as paths relative to it."""
    return sorted(str(p.relative_to(top)) for p in top.rglob("*")
                  if p.is_file() and p.suffix in (".py", ".pyc", ".so", ".pyi"))


def lab_traces(site: Path) -> list[str]:
    """What in a site-packages folder would put the lab on sys.path: its package, its distribution's
    metadata or editable-install finder (named after it), a .pth file or an editable-install link naming
    it or a lab/ source folder."""
    found = []
    for p in sorted(site.iterdir()) if site.is_dir() else []:
        if LAB in p.name.lower().replace("-", "_"):
            found.append(p.name)
        elif p.suffix in (".pth", ".egg-link") and p.is_file():
            text = p.read_text(errors="replace")
            if LAB in text or "lab/src" in text or "sparkserve-lab" in text:
                found.append(f"{p.name}: {text.strip()[:200]}")
    return found


def lab_modules(top: Path) -> list[str]:
    """The module files under `top` that belong to the lab: anything in a folder named sparkserve_lab or
    in a package other than the product's (the image's source folder holds `sparkserve` alone)."""
    out = []
    for rel in python_modules(top):
        parts = Path(rel).parts
        other_package = parts[0] == "src" and len(parts) > 1 and parts[1] not in (PRODUCT, "__pycache__")
        if LAB in parts or other_package:
            out.append(rel)
    return out


def test_no_lab_module_under_the_image_root() -> None:
    modules = python_modules(ROOT)
    assert any(m.startswith(f"src/{PRODUCT}/serving/") for m in modules), (
        f"the product's modules are not under {ROOT}: this test looks in the wrong place")
    assert not lab_modules(ROOT), lab_modules(ROOT)
    assert not (ROOT / "lab").exists(), f"{ROOT / 'lab'} is in the image"


def test_no_lab_in_the_venv() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / "vllm").is_dir(), f"{site} is not the image's site-packages"
    assert not lab_traces(site), lab_traces(site)


def test_the_lab_cannot_be_imported() -> None:
    """Whatever sys.path the image's Python has (its PYTHONPATH, site-packages, .pth files)."""
    names = {m.name for m in pkgutil.iter_modules([p for p in sys.path if p])}
    assert PRODUCT in names and LAB not in names


@pytest.mark.parametrize("plant", ["src/sparkserve_lab/levels/l3.py", "src/sparkserve/sparkserve_lab/x.py",
                                   "src/other/x.py", "lab/src/sparkserve_lab/__init__.py"])
def test_a_planted_lab_module_is_found(tmp_path: Path, plant: str) -> None:
    """The control: the same search finds a lab module wherever one would land under the image root."""
    (tmp_path / "src/sparkserve/serving").mkdir(parents=True)
    (tmp_path / "src/sparkserve/serving/__init__.py").touch()
    assert not lab_modules(tmp_path)
    (tmp_path / plant).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / plant).touch()
    assert lab_modules(tmp_path) == [plant]


@pytest.mark.parametrize(("name", "text"), [
    ("sparkserve_lab", None), ("sparkserve_lab-0.1.0.dist-info", None),
    ("__editable__.sparkserve_lab-0.1.0.pth", "/w/lab/src\n"), ("ci.pth", "/w/lab/src\n"),
    ("__editable___sparkserve_lab_0_1_0_finder.py", "MAPPING = {}\n"),
    ("sparkserve-lab.egg-link", "/w/lab\n"),
])
def test_a_planted_lab_install_is_found(tmp_path: Path, name: str, text: str | None) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "distutils-precedence.pth").write_text("import os\n")
    assert not lab_traces(tmp_path)
    if text is None:
        (tmp_path / name).mkdir()
    else:
        (tmp_path / name).write_text(text)
    assert len(lab_traces(tmp_path)) == 1
