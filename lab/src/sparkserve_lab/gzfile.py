"""Files the run store keeps gzipped (engine logs, benchmark progress events, profiler traces): written
with no name or time in the gzip header, so the same content gives the same bytes, and read back by name
(a name ending in .gz is read through gzip, any other as it is)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path


def write_gzipped(src: Path, dest: Path) -> Path:
    """Copy `src` into `dest`, gzipped; the same content gives the same bytes."""
    with src.open("rb") as fin, dest.open("wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        shutil.copyfileobj(fin, out)
    return dest


def read_bytes(path: Path) -> bytes:
    """A file's content, gunzipped when its name ends in .gz."""
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def read_text(path: Path) -> str:
    """A file's text (undecodable bytes replaced), gunzipped when its name ends in .gz."""
    return read_bytes(path).decode("utf-8", errors="replace")
