"""The per-phase memory watcher of scripts/test.sh."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sparkserve_lab.testing import memwatch

ROOT = Path(__file__).resolve().parents[2]


def fake_proc(tmp_path: Path, available_kb: int, processes: dict[int, tuple[str, int]]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text(f"MemTotal: 24000000 kB\nMemFree: 1 kB\nMemAvailable: {available_kb} kB\n")
    for pid, (name, rss_kb) in processes.items():
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "status").write_text(f"Name:\t{name}\nVmRSS:\t{rss_kb} kB\n")
        (proc / str(pid) / "cmdline").write_bytes(name.encode() + b"\0--flag\0")
    (proc / "self").mkdir()
    return proc


def test_the_largest_process_and_the_memory_in_use(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, 3_000_000, {10: ("dockerd", 900_000), 11: ("cicc", 5_600_000),
                                           12: ("bash", 4)})
    assert memwatch.meminfo(proc) == (24_000_000 * 1024, 21_000_000 * 1024)
    top = memwatch.largest_process(proc)
    assert (top["pid"], top["name"], top["cmdline"]) == (11, "cicc", "cicc --flag")
    assert top["rss"] == 5_600_000 * 1024


def test_a_phase_near_the_machines_memory_says_which_process(tmp_path: Path) -> None:
    peak = tmp_path / "peak.json"
    big = {"pid": 7, "name": "cc1plus", "rss": 21e9, "cmdline": "cc1plus -O3 unit.cu"}
    peak.write_text(json.dumps({"total": 24e9, "in_use": 22e9, "largest": big, "largest_at_peak": big}))
    assert memwatch.report(peak) == ("peak memory in use 22.0 of 24.0 GB; largest process cc1plus (pid 7) "
                                     "21.0 GB -- close to the machine's memory: cc1plus -O3 unit.cu")


def test_the_watcher_samples_until_stopped(tmp_path: Path) -> None:
    out = tmp_path / "phase.json"
    w = subprocess.Popen([sys.executable, "-S", "-m", "sparkserve_lab.testing.memwatch", "watch", str(out),
                          "--interval", "0.1"], env={"PYTHONPATH": str(ROOT / "lab" / "src")})
    for _ in range(100):
        if out.exists():
            break
        time.sleep(0.05)
    time.sleep(0.3)
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0
    peak = json.loads(out.read_text())
    assert peak["samples"] >= 1 and 0 < peak["in_use"] < peak["total"] and peak["largest"]["rss"] > 0
    assert memwatch.report(out).startswith("peak memory in use ")
    assert "memwatch watch" in (ROOT / "scripts" / "test.sh").read_text()


def test_the_least_free_disk_is_kept_and_a_nearly_full_one_is_named(tmp_path: Path) -> None:
    least = memwatch.disk_free([tmp_path, tmp_path / "missing"])
    assert least["path"] == str(tmp_path) and least["free"] > 0
    assert memwatch.disk_free([tmp_path / "missing"]) == {}
    peak = tmp_path / "peak.json"
    top = {"pid": 7, "name": "dockerd", "rss": 1e9, "cmdline": "dockerd"}
    record = {"total": 24e9, "in_use": 2e9, "largest": top, "largest_at_peak": top,
              "disk": {"free": 0.3e9, "path": "/var/lib/docker"}}
    peak.write_text(json.dumps(record))
    assert memwatch.report(peak).endswith(
        "; least disk free 0.3 GB -- close to a full disk at /var/lib/docker")
    record["disk"] = {"free": 40e9, "path": "/work"}
    peak.write_text(json.dumps(record))
    assert memwatch.report(peak).endswith("dockerd (pid 7) 1.0 GB; least disk free 40.0 GB")
    assert "--disk" in (ROOT / "scripts" / "test.sh").read_text()


def test_a_runs_phases_are_summed_up_as_json(tmp_path: Path) -> None:
    """scripts/test.sh's phases.json: each phase's status, seconds and peaks, the run's total and result."""
    proc = fake_proc(tmp_path, 3_000_000, {})
    summary = tmp_path / "phases.json"
    memwatch.start(summary, proc)
    peaks = tmp_path / "memory-image.json"
    top = {"pid": 7, "name": "cicc", "rss": 5e9, "cmdline": "cicc"}
    peaks.write_text(json.dumps({"total": 24e9, "in_use": 21e9, "largest": top, "largest_at_peak": top,
                                 "disk": {"free": 30e9, "path": "/var/lib/docker"}}))
    memwatch.record(summary, "lint", "skipped", 0)
    memwatch.record(summary, "image", "ok", 907, peaks)
    memwatch.record(summary, "dev", "ok", 3, tmp_path / "never-written.json")
    data = memwatch.finish(summary, 960)
    assert data == json.loads(summary.read_text())
    assert data["machine"]["memory_total_bytes"] == 24_000_000 * 1024 and data["machine"]["cores"]
    assert [(p["phase"], p["status"], p["seconds"]) for p in data["phases"]] == [
        ("lint", "skipped", 0), ("image", "ok", 907), ("dev", "ok", 3)]
    image = data["phases"][1]
    assert image["memory_peak_bytes"] == 21e9
    assert image["largest_process"] == {"name": "cicc", "rss_bytes": 5e9}
    assert (image["disk_free_min_bytes"], image["disk_free_min_path"]) == (30e9, "/var/lib/docker")
    assert data["phases"][2]["memory_peak_bytes"] is None and data["phases"][0]["disk_free_min_bytes"] is None
    assert (data["total_seconds"], data["result"]) == (960, "passed")
    memwatch.record(summary, "unit", "failed", 12)
    assert memwatch.finish(summary, 980)["result"] == "failed"


def test_the_summary_commands_run_on_the_standard_library_alone(tmp_path: Path) -> None:
    """As scripts/test.sh calls them, before the venv exists: python -S, the lab's source on PYTHONPATH."""
    summary = tmp_path / "phases.json"

    def memwatch_cli(*args: str) -> None:
        subprocess.run([sys.executable, "-S", "-m", "sparkserve_lab.testing.memwatch", *args], check=True,
                       env={"PYTHONPATH": str(ROOT / "lab" / "src")})

    memwatch_cli("start", str(summary))
    memwatch_cli("record", str(summary), "setup", "ok", "17", "--peaks", str(tmp_path / "none.json"))
    memwatch_cli("finish", str(summary), "17")
    data = json.loads(summary.read_text())
    assert data["result"] == "passed" and data["phases"][0]["phase"] == "setup"
    with pytest.raises(subprocess.CalledProcessError):
        memwatch_cli("record", str(summary), "setup", "maybe", "1")
