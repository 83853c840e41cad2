"""Gate tests of the vLLM patches, run inside the built image (CPU only; scripts/ci/20-image.sh):

    docker run --rm --network none --entrypoint python -v <pytest-lib>:/opt/ci-pytest:ro \
        -v <repo>/tests/image:/opt/ci-tests:ro -e PYTHONPATH=/opt/ci-pytest:/opt/sparkserve/src \
        sparkserve/serve:ci -m pytest -p no:cacheprovider /opt/ci-tests

They import the patched vLLM of the image (no GPU: the device capability is faked) and fail on an
unpatched one, since they use the symbols and behaviour the patches add.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, fragment: str) -> list[str]:
        return [m for r in self.records if fragment in (m := r.getMessage())]


@pytest.fixture
def vllm_log() -> Iterator[_Records]:
    """Every record of the `vllm` logger tree, at any level, with the *_once caches cleared so each test
    sees its own once-only lines."""
    import vllm.logger as vlog

    for fn in (vlog._print_debug_once, vlog._print_info_once, vlog._print_warning_once):
        fn.cache_clear()
    handler = _Records()
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.DEBUG)  # vLLM's own logging setup may not have run (no engine here)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def envs_type_checked() -> set[str]:
    """The names vLLM's envs.py annotates under `if TYPE_CHECKING:` (where vLLM declares every variable of
    envs.environment_variables, for mypy)."""
    import vllm.envs as envs

    tree = ast.parse(Path(envs.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                 and n.test.id == "TYPE_CHECKING")
    return {n.target.id for n in block.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's current platform a CUDA one, without a device (gate_support.fake_platform); a test module may
    fake it where its patch reads it instead."""
    import vllm.platforms
    from gate_support import fake_platform
    from vllm.platforms.interface import PlatformEnum

    monkeypatch.setattr(vllm.platforms, "current_platform", fake_platform(PlatformEnum.CUDA))
