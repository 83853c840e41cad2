"""The offline check the CPU compose test runs inside the serving container."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_the_offline_check_of_the_cpu_compose_test(tmp_path: Path) -> None:
    """`python -m sparkserve_lab.testing offline-check` (run inside serve by the serve-cpu phase)."""
    import socket

    from sparkserve_lab.testing import offline

    from sparkserve.errors import SparkserveError

    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"python\0-m\0vllm.entrypoints.openai.api_server\0")
    (tmp_path / "7" / "environ").write_bytes(b"PATH=/bin\0HF_HUB_OFFLINE=1\0")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        reachable = listener.getsockname()
        with pytest.raises(SparkserveError, match="it has a network"):
            offline.check(tmp_path, reachable)
    assert offline.check(tmp_path, reachable).startswith("offline: HF_HUB_OFFLINE=1")  # closed: refused
    (tmp_path / "7" / "environ").write_bytes(b"PATH=/bin\0")
    with pytest.raises(SparkserveError, match="HF_HUB_OFFLINE=None"):
        offline.check(tmp_path, reachable)
