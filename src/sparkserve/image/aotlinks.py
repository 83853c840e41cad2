"""Make the image's prewarmed FlashInfer modules load as FlashInfer's own AOT modules.

FlashInfer loads `<site>/flashinfer/data/aot/<uri>/<uri>.so` before anything else (flashinfer/jit/env.py,
get_aot_artifacts): no build file is written, no ninja runs, nothing in the JIT workspace is touched. A
symlink there to each module `jit prewarm` built (its build info lists uri and library) lets the server keep
its JIT workspace in the cache volume (FLASHINFER_WORKSPACE_BASE, serving/caches.py), so that what a start
does compile survives `down`, while the prewarmed modules stay read-only in /opt/jit-cache. One prewarmed
library holds the cubins of every arch of the build's list, so one link per module serves 12.1 and 12.0.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.image.aot import aot_dir, aot_path

__all__ = ["aot_dir", "link", "linked"]


def link(build_info: Path, site: Path) -> list[Path]:
    """One link per built module; fails (nothing changed) when a library is missing or a non-link file is
    in the way. Running it again changes nothing."""
    if not (site / "flashinfer").is_dir():
        raise SparkserveError(f"{site} holds no flashinfer package")
    try:
        built = json.loads(build_info.read_text())["built"]
    except (OSError, ValueError, KeyError) as exc:
        raise SparkserveError(f"{build_info}: not a `jit prewarm` build info ({exc})") from exc
    plan: list[tuple[Path, Path]] = []
    for m in built:
        uri, lib = str(m["uri"]), Path(str(m["library"]))
        if not lib.is_file():
            raise SparkserveError(f"module {uri}: the prewarmed library {lib} is missing")
        dest = aot_path(site, uri)
        if dest.exists() and not dest.is_symlink():
            raise SparkserveError(f"{dest} is a file, not a link to the prewarmed cache: remove it")
        plan.append((dest, lib))
    for dest, lib in plan:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.unlink(missing_ok=True)
        os.symlink(lib, tmp)
        tmp.replace(dest)
    return [d for d, _ in plan]


def linked(site: Path) -> tuple[int, list[Path]]:
    """(modules whose link resolves, dangling links) in `site`'s FlashInfer AOT folder."""
    good, dangling = 0, []
    for so in sorted(aot_dir(site).glob("*/*.so")):
        if so.exists():
            good += 1
        elif so.is_symlink():
            dangling.append(so)
    return good, dangling
