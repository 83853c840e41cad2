"""The lab's unit tests share the product tests' fixtures (synthetic pinned upstreams) and their rule
that a skipped test fails under SPARKSERVE_STRICT_SKIPS=1."""

from tests.unit.conftest import *  # noqa: F403
from tests.unit.strict_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401
