"""The peak memory of a CI phase (scripts/test.sh runs one watcher per phase): the machine's memory in use
(MemTotal - MemAvailable) and the largest process by resident memory, sampled until the watcher is stopped;
with --disk, also the least free space seen on the file systems holding those paths (a full disk fails a
phase with messages that name anything but the disk). The facts of a whole run, phase by phase (status,
seconds, the peaks), go to one JSON file: scripts/test.sh writes .work/test/phases.json.

    python3 -m sparkserve_lab.testing.memwatch watch FILE [--interval S] [--disk PATH ...]
    python3 -m sparkserve_lab.testing.memwatch report FILE                 # one line
    python3 -m sparkserve_lab.testing.memwatch start SUMMARY
    python3 -m sparkserve_lab.testing.memwatch record SUMMARY PHASE STATUS SECONDS [--peaks FILE]
    python3 -m sparkserve_lab.testing.memwatch finish SUMMARY SECONDS

(with lab/src on PYTHONPATH)

Standard library only: the first phases run before the project's venv exists. Linux (/proc) only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

GB = 1e9
# A phase whose peak is above this share of the machine's memory is reported as close to the OOM killer.
NEAR = 0.85
# A phase that saw less free disk than this is reported as close to a full disk.
DISK_LOW = 2 * GB


def meminfo(proc: Path = Path("/proc")) -> tuple[int, int]:
    """(total, in use) bytes of the machine."""
    fields: dict[str, int] = {}
    for line in (proc / "meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        fields[key] = int(rest.split()[0]) * 1024
    return fields["MemTotal"], fields["MemTotal"] - fields["MemAvailable"]


def largest_process(proc: Path = Path("/proc")) -> dict[str, Any]:
    """The process with the most resident memory: {pid, name, rss, cmdline}."""
    best: dict[str, Any] = {"pid": 0, "name": "", "rss": 0, "cmdline": ""}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
        if rss > best["rss"]:
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = ""
            best = {"pid": int(entry.name), "name": fields.get("Name", "").strip(), "rss": rss,
                    "cmdline": cmd[:200]}
    return best


def disk_free(paths: list[Path]) -> dict[str, Any]:
    """The least free space (bytes available to an unprivileged writer) among the file systems of `paths`,
    and the path it was seen at; paths that do not exist are left out."""
    least: dict[str, Any] = {}
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        free = st.f_bavail * st.f_frsize
        if not least or free < least["free"]:
            least = {"free": free, "path": str(path)}
    return least


def watch(out: Path, interval: float, proc: Path = Path("/proc"), disks: list[Path] | None = None) -> None:
    """Sample until SIGTERM/SIGINT; `out` holds the peaks so far after every sample that raised one."""
    stop = False

    def done(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, done)
    signal.signal(signal.SIGINT, done)
    peak: dict[str, Any] = {"total": 0, "in_use": 0, "largest_at_peak": {}, "largest": {"rss": 0},
                            "samples": 0}
    while not stop:
        total, used = meminfo(proc)
        top = largest_process(proc)
        changed = False
        if used > peak["in_use"]:
            peak.update(total=total, in_use=used, largest_at_peak=top)
            changed = True
        if top["rss"] > peak["largest"]["rss"]:
            peak["largest"] = top
            changed = True
        disk = disk_free(disks or [])
        if disk and ("disk" not in peak or disk["free"] < peak["disk"]["free"]):
            peak["disk"] = disk
            changed = True
        peak["samples"] += 1
        if changed or peak["samples"] == 1:
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(json.dumps(peak))
            os.replace(tmp, out)
        deadline = time.monotonic() + interval
        while not stop and time.monotonic() < deadline:
            time.sleep(min(0.2, interval))


def report(path: Path) -> str:
    peak = json.loads(path.read_text())
    total, used, top = peak["total"], peak["in_use"], peak["largest"]
    line = (f"peak memory in use {used / GB:.1f} of {total / GB:.1f} GB; largest process {top['name']} "
            f"(pid {top['pid']}) {top['rss'] / GB:.1f} GB")
    if used > NEAR * total:
        line += f" -- close to the machine's memory: {top['cmdline'][:120]}"
    disk = peak.get("disk")
    if disk:
        line += f"; least disk free {disk['free'] / GB:.1f} GB"
        if disk["free"] < DISK_LOW:
            line += f" -- close to a full disk at {disk['path']}"
    return line


STATUSES = ("ok", "failed", "skipped")


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def start(summary: Path, proc: Path = Path("/proc")) -> None:
    """A new run's summary: the machine it runs on, no phase yet."""
    total, _ = meminfo(proc)
    _write(summary, {"schema": 1, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "machine": {"cores": os.cpu_count(), "memory_total_bytes": total},
                     "phases": [], "total_seconds": None, "result": None})


def record(summary: Path, phase: str, status: str, seconds: int, peaks: Path | None = None) -> dict[str, Any]:
    """Append one phase's facts to the summary: its status and seconds, and from its watcher's file (when
    the watcher wrote one) the peak memory in use, the largest process and the least free disk."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r}: one of {', '.join(STATUSES)}")
    data = json.loads(summary.read_text())
    entry: dict[str, Any] = {"phase": phase, "status": status, "seconds": seconds,
                             "memory_peak_bytes": None, "largest_process": None,
                             "disk_free_min_bytes": None, "disk_free_min_path": None}
    try:
        peak = json.loads(peaks.read_text()) if peaks else None
    except (OSError, ValueError):
        peak = None  # the watcher had not written a sample: the phase's facts say so by their nulls
    if peak:
        top = peak["largest"]
        entry.update(memory_peak_bytes=peak["in_use"],
                     largest_process={"name": top["name"], "rss_bytes": top["rss"]})
        if peak.get("disk"):
            entry.update(disk_free_min_bytes=peak["disk"]["free"], disk_free_min_path=peak["disk"]["path"])
    data["phases"].append(entry)
    _write(summary, data)
    return entry


def finish(summary: Path, seconds: int) -> dict[str, Any]:
    """The run's total time and result: failed when a phase failed, else passed."""
    data: dict[str, Any] = json.loads(summary.read_text())
    data["total_seconds"] = seconds
    data["result"] = "failed" if any(p["status"] == "failed" for p in data["phases"]) else "passed"
    _write(summary, data)
    return data


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="memwatch", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("file", type=Path)
    w.add_argument("--interval", type=float, default=2.0)
    w.add_argument("--disk", type=Path, nargs="*", default=[], help="paths whose file systems to watch")
    r = sub.add_parser("report")
    r.add_argument("file", type=Path)
    s = sub.add_parser("start", help="begin a run's summary (JSON)")
    s.add_argument("summary", type=Path)
    rec = sub.add_parser("record", help="append a phase's facts to the summary")
    rec.add_argument("summary", type=Path)
    rec.add_argument("phase")
    rec.add_argument("status", choices=STATUSES)
    rec.add_argument("seconds", type=int)
    rec.add_argument("--peaks", type=Path, help="the phase's watcher file")
    f = sub.add_parser("finish", help="the run's total seconds and result into the summary")
    f.add_argument("summary", type=Path)
    f.add_argument("seconds", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "watch":
        watch(a.file, a.interval, disks=a.disk)
    elif a.cmd == "start":
        start(a.summary)
    elif a.cmd == "record":
        record(a.summary, a.phase, a.status, a.seconds, a.peaks)
    elif a.cmd == "finish":
        finish(a.summary, a.seconds)
    else:
        print(report(a.file))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
