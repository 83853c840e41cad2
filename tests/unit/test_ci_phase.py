"""The test command's phase wrapper (scripts/test.sh): a phase fails when any command of it fails, not
only its last one (a function called in a `||` context runs without errexit)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_phase(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    text = (ROOT / "scripts/test.sh").read_text()
    wrapper = re.search(r"^phase\(\) \{.*?^\}", text, re.S | re.M)
    watcher = re.search(r"^memwatch\(\) \{.*?\}$", text, re.M)
    summary = re.search(r"^FACTS=.*\n^facts\(\) \{.*?\}$", text, re.M)
    assert wrapper and watcher and summary, "phase(), memwatch() or facts() not found in scripts/test.sh"
    script = tmp_path / "t.sh"
    script.write_text(f"set -euo pipefail\nSKIP_PHASES=''\nSUMMARY=()\nreport() {{ :; }}\nROOT={ROOT}\n"
                      f"WORK={tmp_path}\nPY=python3\n{watcher.group(0)}\n{summary.group(0)}\n"
                      f"facts start \"$FACTS\"\n{wrapper.group(0)}"
                      f"\nf() {{ {body}; }}\nphase f f\necho AFTER\n")
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=120)
    left = subprocess.run(["pgrep", "-f", f"memwatch watch {tmp_path}"], capture_output=True, text=True)
    assert left.stdout == "", "the phase's memory watcher outlived it"
    return r


def facts(work: Path) -> dict[str, Any]:
    """The run's phase facts the wrapper wrote (scripts/test.sh: .work/test/phases.json)."""
    return dict(json.loads((work / "phases.json").read_text()))


@pytest.mark.parametrize("body", ["false; true", "true; false", "false"])
def test_any_failing_command_fails_the_phase(body: str, tmp_path: Path) -> None:
    r = run_phase(body, tmp_path)
    assert r.returncode != 0 and "FAILED" in r.stdout and "AFTER" not in r.stdout, r.stdout
    assert [(p["phase"], p["status"]) for p in facts(tmp_path)["phases"]] == [("f", "failed")]


def test_a_passing_phase_goes_on(tmp_path: Path) -> None:
    r = run_phase("true; true", tmp_path)
    assert r.returncode == 0 and "<== f: ok" in r.stdout and "AFTER" in r.stdout, r.stdout
    assert re.search(r"<== f: ok in \d+s; peak memory in use [\d.]+ of [\d.]+ GB; largest process ", r.stdout)
    phase = facts(tmp_path)["phases"][0]
    assert (phase["phase"], phase["status"]) == ("f", "ok") and phase["seconds"] >= 0
    assert phase["memory_peak_bytes"] > 0 and phase["largest_process"]["rss_bytes"] > 0
