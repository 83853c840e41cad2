"""Files the run store keeps gzipped (engine logs, benchmark progress events, profiler traces, and a
record's large artifacts once written: compact()): written with no name or time in the gzip header, so the
same content gives the same bytes, and read back by name (a name ending in .gz is read through gzip, any
other as it is; existing() finds a compacted file by its plain name)."""

from __future__ import annotations

import fnmatch
import gzip
import shutil
from pathlib import Path

# A GPU sitting's every call carries the whole tracked tree, whose size bounds the staged piece beside it
# (docs/GPU.md section 11): a record's artifacts of these names over this size are kept gzipped.
COMPACTED = ("output.log", "upstream-tests.json", "samples-*.json", "step-*.json")
COMPACT_BYTES = 128 * 1024


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


def existing(path: Path) -> Path:
    """`path`, or its gzipped twin (`path` + .gz) where only that exists."""
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and gz.exists() else path


def compact(folder: Path, min_bytes: int = COMPACT_BYTES) -> list[str]:
    """Each file of `folder` named as in COMPACTED and larger than `min_bytes` replaced by its gzipped twin;
    the names replaced."""
    done = []
    for path in sorted(folder.iterdir()):
        if (path.is_file() and any(fnmatch.fnmatch(path.name, pat) for pat in COMPACTED)
                and path.stat().st_size > min_bytes):
            write_gzipped(path, path.with_name(path.name + ".gz"))
            path.unlink()
            done.append(path.name)
    return done
