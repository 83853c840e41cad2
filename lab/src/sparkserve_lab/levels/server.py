"""Start and stop a vLLM OpenAI server for the matrix (level 6): own process group, log to a file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from sparkserve.gate.common import Client
from sparkserve.progress import say


class Server:
    def __init__(self, command: list[str], env: dict[str, str], log: Path, base_url: str) -> None:
        self.command, self.env, self.log, self.base_url = command, env, log, base_url
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid_file(self) -> Path:
        return self.log.with_name(self.log.name + ".pid")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, ready_timeout_s: float) -> float:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        say(f"  server: {' '.join(self.command)}")
        with self.log.open("wb") as f:
            self.proc = subprocess.Popen(
                self.command,
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        # start_new_session: the server leads its own process group (pgid = pid); a supervisor that
        # outlives us (lab/scripts/gpu/matrix_h100.sh) stops leftovers with `kill -- -<pid>`.
        self.pid_file.write_text(f"{self.proc.pid}\n")
        waited = Client(self.base_url).wait_ready(ready_timeout_s, self.alive)
        say(f"  server ready after {waited:.0f}s (pid {self.pid}, log {self.log})")
        return waited

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM the server's process group, SIGKILL after `grace_s`; then wait up to 10 s for the
        engine workers (same group) and kill what is left, also when the server itself already exited."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own process group
        if self.proc.poll() is None:
            os.killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(pgid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if not _wait_group_gone(pgid, 10):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            _wait_group_gone(pgid, 10)
        self.pid_file.unlink(missing_ok=True)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`, from /proc (Linux); [] if /proc is absent."""
    out = []
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            out.append(int(d.name))
    return out


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return True
