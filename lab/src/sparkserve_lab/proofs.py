"""Proofs into the run store: a command that proves a patch (a GPU test, a kernel benchmark, an
end-to-end A/B) runs under `sparkserve proof run`, which makes the record first, hands its folder to the
command (`SPARKSERVE_PROOF_DIR`) for artifacts, keeps the output, and writes the verdict.

The verdict is the command's exit code, so a proving command must assert its claim and exit non-zero
otherwise. A command that only times (`--measurement`) is recorded as kind `measurement`: its verdict is
`measured` (exit 0: it ran and its own sanity checks held) or `fail`, never `pass`.

A proof's metadata records what `provenance` needs to tell later whether it still holds: the patches it
proves, the patch manifest of the Python that ran it, the commit, the pins, and the GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve_lab import gzfile, metadata
from sparkserve_lab.provenance import manifest_patches
from sparkserve_lab.runstore import KIND_MEASUREMENT, KIND_PROOF, METADATA, Run, Store, write_json

OUTPUT = "output.log"
SCHEMA = 1
PASS, FAIL, MEASURED = "pass", "fail", "measured"
# A script of this repository that a record's command runs.
_SCRIPT = re.compile(r"(?<![\w/.-])((?:lab/scripts|lab/tests|scripts|tests)/[\w/.-]+\.(?:py|sh))")


# Where a command that `proof run` runs keeps its artifacts: the record's folder.
PROOF_DIR_ENV = "SPARKSERVE_PROOF_DIR"


def artifact_path(out: str | None, name: str) -> Path | None:
    """Where a command writes its artifact: OUT, or else, under `proof run`, NAME in the record's folder;
    None when neither is given."""
    if out:
        return Path(out)
    return Path(os.environ[PROOF_DIR_ENV]) / name if os.environ.get(PROOF_DIR_ENV) else None


def write_artifact(out: str | None, name: str, data: Any) -> Path | None:
    """DATA as JSON where `artifact_path` says; the path written, or None."""
    path = artifact_path(out, name)
    if path is not None:
        write_json(path, data)
    return path


def verdict_of(kind: str, rc: int) -> str:
    if rc != 0:
        return FAIL
    return MEASURED if kind == KIND_MEASUREMENT else PASS


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
          hardware: str | None = None, kind: str = KIND_PROOF) -> Run:
    gpus = metadata.gpus()
    hw = hardware or metadata.hardware_label(gpus)
    record = store.new_record(hw, name)
    site = metadata.site_info(python)
    meta: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": kind,
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
    meta["verdict"] = verdict_of(str(meta.get("kind")), rc)
    gzfile.compact(record.path)
    meta["files"] = sorted(p.name for p in record.path.iterdir() if p.name != METADATA)
    write_json(record.file(METADATA), meta)
    return meta


def run(store: Store, root: Path, name: str, proves: list[str], command: list[str],
        python: str = sys.executable, hardware: str | None = None, measurement: bool = False
        ) -> tuple[Run, int]:
    """Run `command` as the proof `name` (a measurement if `measurement`); its stdout+stderr go to the
    terminal and to output.log."""
    if not command:
        raise SparkserveError("no command to run (give it after --)")
    kind = KIND_MEASUREMENT if measurement else KIND_PROOF
    record = start(store, root, name, proves, command, python, hardware, kind)
    say(f"proof {name}: {record.hardware}/{record.run_id}")
    env = {**os.environ, PROOF_DIR_ENV: str(record.path), "SPARKSERVE_REQUIRE_GPU": "1",
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


def cited_scripts(meta: Mapping[str, Any]) -> list[str]:
    """Repository scripts and test files the record's command runs."""
    cmd = meta.get("command")
    text = " ".join(str(c) for c in cmd) if isinstance(cmd, list) else str(cmd or "")
    return sorted(set(_SCRIPT.findall(text)))


# Folders the tree has moved since records cited them: the old prefix -> where the same files are now.
MOVED = {"scripts/gpu/": "lab/scripts/gpu/"}


def moved(path: str) -> str:
    """Where a cited path is in today's tree, for a record made before its folder moved."""
    for old, new in MOVED.items():
        if path.startswith(old):
            return new + path[len(old):]
    return path


def recorded_at(meta: Mapping[str, Any]) -> str | None:
    """The commit the record ran from, else the commit that added it to the repository."""
    repo = meta.get("repo") or {}
    return (repo.get("commit") or repo.get("added_in")) if isinstance(repo, dict) else None


def record_problems(meta: Mapping[str, Any], exists: Any) -> list[str]:
    """What is wrong with a stored proof or measurement record. `exists(path, commit)` tells whether a
    script is in the tree (commit None) or in that commit. A computed record's verdict must be what its
    exit code gives; a record without an exit code must say it was imported; a cited script must be in
    the tree, or in the commit the record ran from (then it can still be re-run from there)."""
    out: list[str] = []
    kind, rc, verdict = str(meta.get("kind")), meta.get("exit_code"), meta.get("verdict")
    if kind not in (KIND_PROOF, KIND_MEASUREMENT):
        return [f"not a proof or measurement (kind {kind!r})"]
    if kind == KIND_MEASUREMENT and verdict == PASS:
        out.append("a measurement's verdict is 'measured' or 'fail', never 'pass'")
    if rc is None:
        if meta.get("imported") is not True:
            out.append(f"verdict {verdict!r} without an exit code, and not marked imported")
    elif not isinstance(rc, int) or isinstance(rc, bool):
        out.append(f"exit code {rc!r} is not an integer")
    elif verdict != verdict_of(kind, rc):
        out.append(f"verdict {verdict!r} but exit code {rc} gives {verdict_of(kind, rc)!r}")
    at = recorded_at(meta)
    for script in cited_scripts(meta):
        if exists(script, None) or exists(moved(script), None):
            continue
        if at is None or not exists(script, at):
            out.append(f"cites {script}, which is neither in the tree nor in the commit it ran from ({at})")
    return out


def git_exists(root: Path) -> Any:
    """`exists(path, commit)` for record_problems, reading `root` and its git history."""
    def exists(path: str, commit: str | None) -> bool:
        if commit is None:
            return (root / path).is_file()
        proc = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{commit}:{path}"],
                              capture_output=True, check=False)
        return proc.returncode == 0
    return exists
