"""The product's concerns import down the stack of docs/ARCHITECTURE.md, never up or sideways, and never the
lab (lab/src/sparkserve_lab), which imports the product."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "sparkserve"
SHARED = {"errors", "progress", "checks", "config", "__init__", "__version__"}
# What each concern may import besides itself and the shared modules.
ALLOWED = {
    "cli": {"supply", "image", "serving", "gate", "metrics"},
    "gate": {"serving"},
    "serving": {"supply", "image"},
    "supply": set(),
    "image": set(),
    "metrics": set(),
    "shared": set(),
    "entry": {"cli"},  # src/sparkserve/__main__.py: `python -m sparkserve`
}


def concern(module: str) -> str:
    """sparkserve.gate.smoke -> gate; sparkserve.errors -> shared; sparkserve_lab.x -> lab."""
    if module.split(".")[0] == "sparkserve_lab":
        return "lab"
    part = module.split(".")[1] if module.count(".") else "__init__"
    return "shared" if part in SHARED or part.endswith(".py") else part


def imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in (
                "sparkserve", "sparkserve_lab"):
            if node.module == "sparkserve":
                out += [f"sparkserve.{a.name}" for a in node.names]
            else:
                out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] in ("sparkserve", "sparkserve_lab")]
    return out


def test_imports_follow_the_layers() -> None:
    wrong = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        here = rel.parts[0] if len(rel.parts) > 1 else "entry" if rel.name == "__main__.py" else "shared"
        for mod in imports(path):
            there = concern(mod)
            if there in ("shared", here) or there in ALLOWED[here]:
                continue
            wrong.append(f"{rel} ({here}) imports {mod} ({there})")
    assert not wrong, "\n".join(wrong)


def test_every_concern_is_a_package_of_the_tree() -> None:
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED) - {"shared", "entry"}
