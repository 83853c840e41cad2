"""SPARKSERVE_STRICT_SKIPS: a skipped unit test fails instead of passing quietly.

`1` (the unit phase of scripts/test.sh): a skip fails unless its module is one that
scripts/ci/40-levels-cpu.sh runs again with the extras it needs (EXTRAS_MODULES, kept equal to that script
by tests/unit/test_strict_skips.py). `all` (that second run): every skip fails. Unset: pytest as usual,
for a developer without the extras.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ENV = "SPARKSERVE_STRICT_SKIPS"
# Unit modules that need torch, tokenizers, openai_harmony or matplotlib (not in the dev extras).
EXTRAS_MODULES = frozenset({
    "test_tinymodel.py", "test_validate_kernels.py", "test_gptoss_dummy.py", "test_runstore_report.py",
    "test_moe_reference.py", "test_moe_sweep_dry_run.py", "test_gptoss_weights.py",
})


def refused(module: str, mode: str | None) -> bool:
    """Whether a skip in `module` fails under `mode`."""
    if not mode:
        return False
    return mode == "all" or module not in EXTRAS_MODULES


def _fail(rep: Any, module: str, mode: str) -> None:
    rep.outcome = "failed"
    rep.longrepr = f"skipped, and {ENV}={mode} refuses a skip in {module}: {rep.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    rep = outcome.get_result()
    mode = os.environ.get(ENV)
    module = Path(str(item.fspath)).name
    if rep.skipped and not hasattr(rep, "wasxfail") and mode and refused(module, mode):
        _fail(rep, module, mode)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    rep = outcome.get_result()
    mode = os.environ.get(ENV)
    module = Path(str(collector.path)).name
    if rep.skipped and mode and refused(module, mode):  # a module-level importorskip
        _fail(rep, module, mode)
