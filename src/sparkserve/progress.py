"""Progress and phase output for long work (stderr, so stdout stays machine-readable)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def say(msg: str) -> None:
    # one write with its newline: lines said from several threads do not run into each other
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


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
