"""Run vLLM as a child of the entrypoint instead of replacing it, so the entrypoint can read the engine's
output as it passes (the start summary) while everything else stays as with exec: the output is written
through unchanged, SIGTERM / SIGINT / SIGHUP go to the child, and the child's exit status is the
entrypoint's (128 + N when a signal N ended it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run(argv: list[str], on_line: Callable[[str, float], list[str]]) -> int:
    """Start argv; every output line goes to stdout and to on_line (with its arrival time), and what
    on_line returns is printed after it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy())

    def forward(signum: int, _frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    out = sys.stdout.buffer
    try:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            out.write(raw)
            out.flush()
            for extra in on_line(raw.decode("utf-8", errors="replace"), time.monotonic()):
                out.write((extra + "\n").encode())
            out.flush()
        rc = proc.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc
