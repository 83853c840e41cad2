"""GPU tests of the patch series (run on a GPU host with the pinned stack: docs/GPU.md).

With SPARKSERVE_REQUIRE_GPU=1 (set by `sparkserve proof run`, so by every GPU proof) a skip is a
failure: a proof whose tests skipped proved nothing. Artifacts go to SPARKSERVE_PROOF_DIR (the proof
record's folder) when it is set (tests/gpu/proof_artifacts.py).
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

REQUIRE_GPU = os.environ.get("SPARKSERVE_REQUIRE_GPU") == "1"


def _fail_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if REQUIRE_GPU and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped with SPARKSERVE_REQUIRE_GPU=1, which makes a skip a failure: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, None, None]:
    outcome = yield
    _fail_skip(outcome.get_result())
