"""Progress and phase output for long work (stderr, so stdout stays machine-readable).

How much of it shows is the command line's global `-q` / `-v` (set_verbosity): quiet keeps errors and
warnings (error()), verbose adds the detail lines (detail()) a normal run leaves out.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

QUIET, NORMAL, VERBOSE = -1, 0, 1
_level = NORMAL


def set_verbosity(level: int) -> None:
    global _level
    _level = level


def _write(msg: str) -> None:
    # one write with its newline: lines said from several threads do not run into each other
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def say(msg: str) -> None:
    """Progress: shown unless -q."""
    if _level > QUIET:
        _write(msg)


def detail(msg: str) -> None:
    """What a normal run need not show: with -v only."""
    if _level >= VERBOSE:
        _write(msg)


def error(msg: str) -> None:
    """Errors and warnings: always shown, -q included."""
    _write(msg)


class ByteProgress:
    """Prints 'name: 42% (20/47 MB)' at most every half second."""

    def __init__(self, name: str, total: int | None) -> None:
        self.name, self.total, self.done = name, total, 0
        self._last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= 0.5:
            self._last = now
            self._print()

    def finish(self) -> None:
        self._print()

    def _print(self) -> None:
        mb = self.done / 1e6
        if self.total:
            pct = 100 * self.done / self.total
            say(f"  {self.name}: {pct:5.1f}% ({mb:.1f}/{self.total / 1e6:.1f} MB)")
        else:
            say(f"  {self.name}: {mb:.1f} MB")


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Announce a phase and print its wall time when it ends (also on failure)."""
    say(f"==> {name}")
    start = time.monotonic()
    ok = False
    try:
        yield
        ok = True
    finally:
        status = "ok" if ok else "FAILED"
        say(f"<== {name}: {status} in {time.monotonic() - start:.1f}s")
