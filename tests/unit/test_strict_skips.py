"""SPARKSERVE_STRICT_SKIPS: CI's unit phase fails on a skip outside the modules its extras run covers,
and that run fails on any skip."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit import strict_skips

ROOT = Path(__file__).resolve().parents[1].parent


def test_the_extras_modules_are_those_the_levels_phase_runs_again() -> None:
    script = (ROOT / "scripts" / "ci" / "40-levels-cpu.sh").read_text()
    run = re.search(r"SPARKSERVE_STRICT_SKIPS=all [^\n]*pytest(?:[^\n]*\\\n)*[^\n]*", script)
    assert run, "the extras run refuses any skip"
    files = re.findall(r"\$ROOT/([\w/]+/test_\w+\.py)", run.group(0))
    assert {Path(f).name for f in files} == strict_skips.EXTRAS_MODULES
    assert all((ROOT / f).is_file() for f in files), [f for f in files if not (ROOT / f).is_file()]


def test_the_unit_phase_runs_strict() -> None:
    assert re.search(r"unit\(\) \{ SPARKSERVE_STRICT_SKIPS=1 ", (ROOT / "scripts" / "test.sh").read_text())


@pytest.mark.parametrize(("module", "mode", "fails"), [
    ("test_x.py", None, False), ("test_x.py", "1", True), ("test_tinymodel.py", "1", False),
    ("test_tinymodel.py", "all", True), ("test_x.py", "all", True),
])
def test_which_skips_fail(module: str, mode: str | None, fails: bool) -> None:
    assert strict_skips.refused(module, mode) is fails


SKIPPERS = {
    "test_skipper.py": "import pytest\n\ndef test_ok():\n    pass\n\n"
                       "def test_a():\n    pytest.skip('no extra')\n",
    "test_noextra.py": "import pytest\n\npytest.importorskip('no_such_module_here')\n\n"
                       "def test_b():\n    pass\n",
}


@pytest.mark.parametrize("module", sorted(SKIPPERS))
@pytest.mark.parametrize("mode", ["", "1"])
def test_a_skip_fails_a_strict_run(tmp_path: Path, module: str, mode: str) -> None:
    """A test that skips, and a module that skips as a whole (importorskip)."""
    (tmp_path / module).write_text(SKIPPERS[module])
    env = {**os.environ, "PYTHONPATH": str(ROOT), strict_skips.ENV: mode}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.unit.strict_skips", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    if mode:
        assert proc.returncode not in (0, 5) and f"refuses a skip in {module}" in out, out
    else:
        assert proc.returncode in (0, 5) and "skipped" in out, out  # 5: every test skipped
