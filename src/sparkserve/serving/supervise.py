"""Run vLLM as a child of the entrypoint instead of replacing it, so the entrypoint can read the engine's
output as it passes (the start summary) while everything else stays as with exec: the output is written
through unchanged, SIGTERM / SIGINT / SIGHUP go to the child, and the child's exit status is the
entrypoint's (128 + N when a signal N ended it).

The entrypoint must end whenever the server is gone or hung, so that the container's restart policy
brings it back (Docker never restarts a container that is only unhealthy):
- vLLM runs in a session (and process group) of its own, and the entrypoint adopts what it leaves behind
  (a child subreaper): when the API server dies, its engine core and resource tracker are orphans that
  still hold the output pipe. Waiting for that pipe's end would wait forever; the entrypoint waits for
  the API server itself, then stops the whole group (SIGTERM, SIGKILL after a grace) and reaps it.
- Output is read by a thread, so nothing the main loop does waits on the pipe.
- A watchdog asks the server's /health (a cluster's worker, which has none: the head's rendezvous port);
  once it has answered, `failures` misses in a row stop the whole group and the entrypoint exits with the
  watchdog's code (EXIT_WATCHDOG; a worker that lost its head: EXIT_RANK).
- A judge reads each output line (a cluster's lost rank: serving/rankwatch.py); a verdict stops the whole
  group at once and the entrypoint exits with its code. What vLLM prints once it was told to stop is not
  judged: a stop takes the other ranks' connections down with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import IO

from sparkserve.serving import health
from sparkserve.serving.preflight import EXIT_WATCHDOG

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# After the server's exit (or the watchdog's verdict): how long what is left of its group gets after
# SIGTERM before SIGKILL.
GRACE_S = 10.0
# After SIGKILL: how long the output still left in the pipe is copied through.
DRAIN_S = 2.0
# After the server's own exit: how long its last output lines are waited for (and judged) before what
# is left of its group is stopped.
LAST_WORDS_S = 1.0
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Verdict:
    """Why the supervisor stops the server itself, and the exit status it then returns."""

    code: int
    reason: str


@dataclass(frozen=True)
class Watchdog:
    """Ask `url` every `interval_s` (health.probe: http:// wants a 200, tcp:// a connection); after the
    first answer, `failures` misses in a row end the server with exit `code`, the verdict naming `what`
    stopped answering. Before the first answer nothing is counted: a start may take many minutes
    (compose's start_period), and a worker's head may start after it."""

    url: str
    interval_s: float = 15.0
    failures: int = 3
    timeout_s: float = 8.0
    code: int = EXIT_WATCHDOG
    what: str = "watchdog"


def _say(msg: str) -> None:
    print(f"sparkserve: {msg}", file=sys.stderr, flush=True)


def _become_subreaper() -> bool:
    """Orphans of vLLM are re-parented to this process instead of to init, so it can reap them and knows
    when the last one is gone. Linux only; elsewhere init reaps them."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _reap_others(keep: int) -> bool:
    """Reap every exited child except `keep` (Popen's own); False when no child is left at all."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        if info is None or info.si_pid == keep:
            return True
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


Event = tuple[str, bytes | Verdict]


def _read(stream: IO[bytes], out: queue.Queue[Event]) -> None:
    for raw in iter(stream.readline, b""):
        out.put(("line", raw))
    out.put(("eof", b""))


def _watch(dog: Watchdog, out: queue.Queue[Event], stop: threading.Event) -> None:
    answered, missed = False, 0
    while not stop.wait(dog.interval_s):
        if health.probe(dog.url, dog.timeout_s):
            answered, missed = True, 0
            continue
        if not answered:
            continue
        missed += 1
        if missed >= dog.failures:
            reason = (f"{dog.what}: {dog.url} did not answer {missed} checks in a row "
                      f"({dog.interval_s:g} s apart)")
            out.put(("verdict", Verdict(dog.code, reason)))
            return


def run(argv: list[str], on_line: Callable[[str, float], list[str]], watchdog: Watchdog | None = None,
        grace_s: float = GRACE_S, env: Mapping[str, str] | None = None,
        judge: Callable[[str], Verdict | None] | None = None) -> int:
    """Start argv in `env` (default: this process's environment); every output line goes to stdout and
    to on_line (with its arrival time), and what on_line returns is printed after it; `judge` reads each
    line too, until a stop signal was forwarded. Returns the server's exit status, or the code of the
    verdict (the watchdog's, the judge's) that stopped it; in each case nothing of its process group is
    left running."""
    adopted = _become_subreaper()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ if env is None else env), start_new_session=True)
    pgid = proc.pid  # a new session: its leader's pid is the group's id

    stopping = threading.Event()

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    events: queue.Queue[Event] = queue.Queue()
    stop = threading.Event()
    assert proc.stdout is not None
    threading.Thread(target=_read, args=(proc.stdout, events), name="server-output", daemon=True).start()
    if watchdog is not None:
        threading.Thread(target=_watch, args=(watchdog, events, stop), name="watchdog", daemon=True).start()
    out = sys.stdout.buffer
    eof = False

    def handle(kind: str, data: bytes) -> Verdict | None:
        nonlocal eof
        if kind == "eof":
            eof = True
            return None
        out.write(data)
        line = data.decode("utf-8", errors="replace")
        for extra in on_line(line, time.monotonic()):
            out.write((extra + "\n").encode())
        out.flush()
        return judge(line) if judge is not None and not stopping.is_set() else None

    def pump(until: float) -> Verdict | None:
        """Copy output through until `until`; a verdict (the watchdog's, the judge's) is returned at once."""
        while (left := until - time.monotonic()) > 0:
            try:
                kind, data = events.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if isinstance(data, Verdict):
                return data
            verdict = handle(kind, data)
            if verdict is not None:
                return verdict
        return None

    def gone() -> bool:
        """The server has exited, its output has ended and (where adopted) no process of it is left."""
        if proc.returncode is None:
            proc.poll()
        children = _reap_others(proc.pid if proc.returncode is None else -1) if adopted else False
        return proc.returncode is not None and eof and not children

    try:
        rc = 0
        while True:
            verdict = pump(time.monotonic() + 0.2)
            if adopted:
                _reap_others(proc.pid)
            if verdict is not None:
                _say(f"{verdict.reason}: stopping the server (exit {verdict.code}; the restart policy starts "
                     "it again)")
                rc = verdict.code
                break
            status = proc.poll()
            if status is not None:
                rc = 128 - status if status < 0 else status
                # its last words, printed before it exited, may still be on their way: judged too
                deadline = time.monotonic() + LAST_WORDS_S
                while not eof and (left := deadline - time.monotonic()) > 0:
                    verdict = pump(time.monotonic() + min(left, 0.1))
                    if verdict is not None:
                        _say(f"{verdict.reason} (the server had exited with {rc}; exit {verdict.code})")
                        rc = verdict.code
                        break
                break
        stop.set()
        stopping.set()  # what the server prints from here on is its way down: no further verdict
        # What is left of the group: the engine core and resource tracker of a killed API server, or all
        # of it after the watchdog's verdict.
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while not gone():
            if time.monotonic() >= deadline:
                _say(f"the server's processes did not end within {grace_s:g} s of SIGTERM: SIGKILL")
                _signal_group(pgid, signal.SIGKILL)
                deadline = time.monotonic() + DRAIN_S
                while not gone() and time.monotonic() < deadline:
                    pump(time.monotonic() + 0.1)
                break
            pump(time.monotonic() + 0.1)
        out.flush()
    finally:
        stop.set()
        for s, h in previous.items():
            signal.signal(s, h)
    return rc
