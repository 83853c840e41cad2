"""Locate the uv binary: the `uv` package's own, else one on PATH."""

from __future__ import annotations

import functools
import shutil

from sparkserve.errors import SparkserveError


# Found once: the uv package reads sysconfig to find it, which is not safe to do first from several threads
# at once (the lock check runs its locks side by side).
@functools.cache
def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise SparkserveError("uv is not installed: pip install uv")
