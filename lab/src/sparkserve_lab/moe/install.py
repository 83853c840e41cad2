"""Install a tactic table where the entrypoint looks for it (`$SPARKSERVE_STATE_DIR/moe-tactics.json`, the
state volume), after the same checks the entrypoint makes at start, against the Python this runs in (its
FlashInfer version and applied FlashInfer patches) and, when given, the GPU's compute capability."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
from pathlib import Path

from sparkserve.serving.moe import state
from sparkserve.serving.moe import table as tables
from sparkserve.serving.moe.shape import MoeShape
from sparkserve_lab.moe.record import flashinfer_site


def default_dir() -> Path:
    return Path(os.environ.get("SPARKSERVE_STATE_DIR", state.DEFAULT_STATE_DIR))


def environment_here(path: str, shape: MoeShape, compute_capability: str | None) -> tables.Environment:
    try:
        version = md.version("flashinfer-python")
    except md.PackageNotFoundError:
        version = "not installed"
    return tables.Environment(version, state.flashinfer_patches(flashinfer_site()), compute_capability, path,
                              shape)


def install(table_file: Path, dest_dir: Path, shape: MoeShape, compute_capability: str | None,
            allow_synthetic: bool = False) -> Path:
    """Check `table_file` against this environment and copy it to dest_dir/moe-tactics.json; raises
    TableError naming every mismatch."""
    table = tables.load(table_file)
    problems = tables.check(table, environment_here(table.build.path, shape, compute_capability),
                            allow_synthetic)
    if problems:
        raise tables.TableError(f"{table_file} does not fit this environment: " + "; ".join(problems))
    dest = dest_dir / state.TABLE_FILE
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(table_file, tmp)
    tmp.replace(dest)
    return dest
