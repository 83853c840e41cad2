"""The digest of a failing CI phase that scripts/test.sh prints last."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sparkserve_lab.testing import phaselog

ROOT = Path(__file__).resolve().parents[2]

LOG = """\
==> ansible
FAILED - RETRYING: [ans-mol-spark]: Wait until the container is healthy (200 retries left).
TASK [serve : Bring the release up] ***
fatal: [ans-mol-spark]: FAILED! =>
    msg: 'write /var/lib/docker/tmp/x: No space left on device'
ansible phase step times:
  molecule-default 12
"""


def test_the_error_lines_then_the_end_and_retries_left_out() -> None:
    out = phaselog.digest(LOG, errors=15, tail=3)
    assert out[0] == "lines that look like errors (2, the last 2):"
    assert out[1:3] == ["  4: fatal: [ans-mol-spark]: FAILED! =>",
                        "  5:     msg: 'write /var/lib/docker/tmp/x: No space left on device'"]
    assert out[3] == "the last 3 of 7 lines:"
    assert out[4:] == ["  |     msg: 'write /var/lib/docker/tmp/x: No space left on device'",
                       "  | ansible phase step times:", "  |   molecule-default 12"]


def test_only_the_last_error_lines_and_long_lines_cut() -> None:
    text = "\n".join(f"error: number {n}" for n in range(30)) + "\n" + "x" * 1000
    out = phaselog.digest(text, errors=2, tail=1)
    assert out[:3] == ["lines that look like errors (30, the last 2):", "  29: error: number 28",
                       "  30: error: number 29"]
    assert len(out[-1]) == phaselog.WIDTH and out[-1].endswith("...")


def test_the_command_reads_a_log_and_test_sh_calls_it(tmp_path: Path) -> None:
    log = tmp_path / "phase.log"
    log.write_text(LOG)
    out = subprocess.run([sys.executable, "-S", "-m", "sparkserve_lab.testing.phaselog", str(log), "--tail",
                          "1"], env={"PYTHONPATH": str(ROOT / "lab" / "src")}, capture_output=True, text=True,
                         check=True)
    assert out.stdout.splitlines()[-1] == "  |   molecule-default 12"
    assert "sparkserve_lab.testing.phaselog" in (ROOT / "scripts" / "test.sh").read_text()
