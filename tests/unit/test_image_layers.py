"""The Dockerfile's `patched` and `jit` stages copy exactly the part of the package that their commands
(`python -m sparkserve.cli.imagebuild patches apply` / `jit prewarm`) import, so that editing anything
else (the harness, the serving code, other verbs) reuses the patch and JIT layers. The import closure is
taken from the source (every `sparkserve` import, also those inside functions)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
ENTRY = "sparkserve.cli.imagebuild"


def module_file(name: str) -> Path | None:
    base = SRC / name.replace(".", "/")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def closure(entry: str) -> set[Path]:
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the packages on the way are imported too
            f = module_file(".".join(parts[:i]))
            if f is None or f in seen:
                continue
            seen.add(f)
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    todo += [a.name for a in node.names if a.name.startswith("sparkserve")]
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparkserve"):
                    assert node.module
                    todo.append(node.module)
                    todo += [f"{node.module}.{a.name}" for a in node.names]
    return seen


def stage_copies(stage: str) -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    m = re.search(rf"^FROM \S+ AS {stage}\n(.*?)(?=^FROM )", text, re.S | re.M)
    assert m, f"no stage {stage} in the Dockerfile"
    out: list[str] = []
    for line in re.findall(r"^COPY (?!--from)(.+)$", m.group(1), re.M):
        out += [w for w in line.split()[:-1] if w.startswith("src/")]
    return out


def copied_files(stages: tuple[str, ...]) -> set[Path]:
    files: set[Path] = set()
    for src in (s for st in stages for s in stage_copies(st)):
        p = ROOT / src
        files |= set(p.rglob("*.py")) if p.is_dir() else {p}
    return files


def test_the_build_stages_copy_every_module_their_commands_import() -> None:
    need = closure(ENTRY)
    missing = sorted(str(p.relative_to(ROOT)) for p in need - copied_files(("patched", "jit")))
    assert not missing, f"add to the Dockerfile's patched stage: {missing}"


def test_the_build_stages_copy_nothing_they_do_not_run() -> None:
    """Otherwise an edit of that file would re-apply the patches and re-run the JIT prewarm."""
    whole = (SRC / "sparkserve/supply", SRC / "sparkserve/image")  # the patch and JIT code, copied whole
    extra = sorted(str(p.relative_to(ROOT)) for p in copied_files(("patched", "jit")) - closure(ENTRY)
                   if not any(p.is_relative_to(w) for w in whole))
    assert not extra, f"copied into the build stages but not imported by {ENTRY}: {extra}"
    assert not any("harness" in s or "serving" in s for s in stage_copies("patched") + stage_copies("jit"))


def test_the_closure_is_what_it_should_be() -> None:
    """A sanity check of the walker itself: it follows lazy imports inside functions."""
    names = {str(p.relative_to(SRC)) for p in closure(ENTRY)}
    assert "sparkserve/supply/patches/apply.py" in names and "sparkserve/image/prewarm.py" in names
