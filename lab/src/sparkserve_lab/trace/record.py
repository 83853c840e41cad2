"""A decode-step breakdown in the run store: kind "decode-profile", one record per configuration and
capture (results/<hardware>/<UTC time>-decode-profile-<configuration>-<hex>/).

    metadata.json        command, GPU, commit, pins, patch manifest, the server's command line and
                         environment (its manifest), the classes file and its sha256, verdict
    decode-profile.json  per batch: time per kernel class, kernels, idle, host time, step period
    kernels-b<N>.json    every kernel name of the decode steps at batch N: class, launches, time per step
    step-b<N>.json       the median decode step's kernels in order (the summarized trace; .json.gz past
                         gzfile.COMPACT_BYTES, read by the plain name through runstore.read_json)
    trace-b<N>.json.gz   the raw torch profiler trace, only when it is at most RAW_TRACE_LIMIT bytes
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sparkserve_lab.runstore import read_json

KIND = "decode-profile"
SUMMARY = "decode-profile.json"
# A prefill-chunk breakdown (`trace prefill`): prefill-profile.json per concurrency, kernels-c<N>.json,
# step-c<N>.json (the median full chunk), trace-c<N>.json.gz under the same size limit.
PREFILL_KIND = "prefill-profile"
PREFILL_SUMMARY = "prefill-profile.json"
# Bytes of gzipped trace kept in the store (the store travels with every GPU call); larger ones are
# summarized only. A decode capture of 64 steps of gpt-oss-120b is about 2 MB.
RAW_TRACE_LIMIT = 1_000_000


def keep_trace(src: Path, dest_dir: Path, batch: int, tag: str = "b") -> dict[str, Any]:
    """Copy the raw trace into the record when it is small enough; otherwise say why it was left out.
    `tag`: b (a decode batch) or c (a prefill capture's concurrency) in the files' names."""
    n = f"{tag}{batch}"
    size = src.stat().st_size
    if not src.name.endswith(".gz"):
        import gzip

        data = gzip.compress(src.read_bytes(), compresslevel=6)
        size_gz = len(data)
        if size_gz <= RAW_TRACE_LIMIT:
            (dest_dir / f"trace-{n}.json.gz").write_bytes(data)
            return {"raw_trace": f"trace-{n}.json.gz", "bytes": size_gz}
        return {"raw_trace": None, "bytes": size_gz,
                "note": f"raw trace left out: {size_gz:,} bytes gzipped > {RAW_TRACE_LIMIT:,}; "
                        f"step-{n}.json and kernels-{n}.json summarize it"}
    if size <= RAW_TRACE_LIMIT:
        shutil.copyfile(src, dest_dir / f"trace-{n}.json.gz")
        return {"raw_trace": f"trace-{n}.json.gz", "bytes": size}
    return {"raw_trace": None, "bytes": size,
            "note": f"raw trace left out: {size:,} bytes gzipped > {RAW_TRACE_LIMIT:,}; "
                    f"step-{n}.json and kernels-{n}.json summarize it"}


def summary(path: Path) -> dict[str, Any]:
    return dict(read_json(path / SUMMARY))
