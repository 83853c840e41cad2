"""Proofs into the run store: a command that proves a patch (a GPU test, a kernel benchmark, an
end-to-end A/B) runs under `sparkserve proof run`, which makes the record first, hands its folder to the
command (`SPARKSERVE_PROOF_DIR`) for artifacts, keeps the output, and writes the verdict.

A proof's metadata records what `provenance` needs to tell later whether it still holds: the patches it
proves, the patch manifest of the Python that ran it, the commit, the pins, and the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.harness import metadata
from sparkserve.harness.provenance import manifest_patches
from sparkserve.harness.runstore import KIND_PROOF, METADATA, Run, Store, write_json
from sparkserve.progress import say

OUTPUT = "output.log"
SCHEMA = 1


def check_proves(proves: list[str], series: Mapping[str, Mapping[str, object]]) -> None:
    """Each `upstream/id` must name a patch of the series: a proof of nothing proves nothing."""
    if not proves:
        raise SparkserveError("name at least one patch the proof proves (--proves upstream/id)")
    unknown = [p for p in proves if p.partition("/")[2] not in series.get(p.partition("/")[0], {})]
    if unknown:
        known = ", ".join(f"{u}/{i}" for u, ids in series.items() for i in ids)
        raise SparkserveError(f"not in the series: {', '.join(unknown)} (the series: {known})")


def _manifest_upstreams(manifest: Any) -> dict[str, Any] | None:
    if manifest_patches(manifest) is None:
        return None
    return dict(manifest["upstreams"])


def start(store: Store, root: Path, name: str, proves: list[str], command: list[str], python: str,
          hardware: str | None = None) -> Run:
    gpus = metadata.gpus()
    hw = hardware or metadata.hardware_label(gpus)
    record = store.new_proof(hw, name)
    site = metadata.site_info(python)
    meta: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": KIND_PROOF,
        "name": name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hardware": hw,
        "gpu": gpus,
        "command": command,
        "proves": proves,
        "repo": metadata.repo_info(root),
        "site": {k: v for k, v in site.items() if k != "patch_manifest"},
        # the site manifest's own form ({upstream: {"patches": [{id, sha256, code_sha256}]}}), as provenance
        # reads it back
        "patches": _manifest_upstreams(site.get("patch_manifest")),
        "verdict": None,
    }
    write_json(record.file(METADATA), meta)
    return record


def finish(record: Run, rc: int, wall_s: float) -> dict[str, Any]:
    meta = record.metadata()
    meta["exit_code"] = rc
    meta["wall_s"] = round(wall_s, 1)
    meta["verdict"] = "pass" if rc == 0 else "fail"
    meta["files"] = sorted(p.name for p in record.path.iterdir() if p.name != METADATA)
    write_json(record.file(METADATA), meta)
    return meta


def run(store: Store, root: Path, name: str, proves: list[str], command: list[str],
        python: str = sys.executable, hardware: str | None = None) -> tuple[Run, int]:
    """Run `command` as the proof `name`; its stdout+stderr go to the terminal and to output.log."""
    if not command:
        raise SparkserveError("no command to run (give it after --)")
    record = start(store, root, name, proves, command, python, hardware)
    say(f"proof {name}: {record.hardware}/{record.run_id}")
    env = {**os.environ, "SPARKSERVE_PROOF_DIR": str(record.path), "SPARKSERVE_REQUIRE_GPU": "1",
           "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    with record.file(OUTPUT).open("w") as log:
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                    text=True, bufsize=1)
        except OSError as exc:
            finish(record, 127, time.monotonic() - t0)
            raise SparkserveError(f"cannot start {command[0]}: {exc.strerror}") from None
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        rc = proc.wait()
    meta = finish(record, rc, time.monotonic() - t0)
    say(f"proof {name}: {meta['verdict'].upper()} (exit {rc}) -> {record.path}")
    return record, rc
