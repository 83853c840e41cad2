"""Where a GPU test keeps its numbers for the proof record. Not in conftest.py: a run that collects
tests/gpu beside tests/image (a patch's Proof tests under `patches mutate`) has two modules named
conftest, and `from conftest import ...` would find the other one."""

from __future__ import annotations

import os
from pathlib import Path


def artifact_path(name: str) -> Path | None:
    """The file `name` in the proof record's folder (None outside a proof)."""
    d = os.environ.get("SPARKSERVE_PROOF_DIR")
    return Path(d) / name if d else None
