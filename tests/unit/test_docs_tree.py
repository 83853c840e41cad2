"""The README and docs/ARCHITECTURE.md name paths that exist, and docs/ARCHITECTURE.md places every
package of both parts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r"`([^`\s]+)`")
# a Hugging Face model id; the scratch folder the test command creates, and what it writes there (absent in
# a fresh clone)
NOT_PATHS = {"openai/gpt-oss-120b", ".work/"}


def named_paths(text: str) -> set[str]:
    """Backticked repo paths: containing a slash or a dot-file name, no placeholders, no image references
    (`name:tag`)."""
    out = set()
    for m in CODE.findall(text):
        path = m.rstrip(",.;:")
        if ("/" in path or re.fullmatch(r"[\w.-]+\.(toml|yml|yaml|md|sh)|Dockerfile", path)) and \
                not any(c in path for c in "<>*{}$=:") and not path.startswith(("/", "http", "..", "~")):
            out.add(path.split("#")[0])
    return out


@pytest.mark.parametrize("doc", ["README.md", "docs/ARCHITECTURE.md"])
def test_named_paths_exist(doc: str) -> None:
    text = (ROOT / doc).read_text()
    missing = sorted(p for p in named_paths(text) - NOT_PATHS
                     if not p.startswith(".work/") and not (ROOT / p).exists())
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_every_package_is_placed() -> None:
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for base in (ROOT / "src" / "sparkserve", ROOT / "lab" / "src" / "sparkserve_lab"):
        for pkg in sorted(p for p in base.iterdir() if (p / "__init__.py").exists()):
            rel = f"{pkg.relative_to(ROOT)}/"
            assert rel in arch, f"docs/ARCHITECTURE.md does not place {rel}"
