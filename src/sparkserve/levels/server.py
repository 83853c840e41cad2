"""Start and stop a vLLM OpenAI server for the matrix (level 6): own process group, log to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from sparkserve.levels.common import Client
from sparkserve.progress import say


class Server:
    def __init__(self, command: list[str], env: dict[str, str], log: Path, base_url: str) -> None:
        self.command, self.env, self.log, self.base_url = command, env, log, base_url
        self.proc: subprocess.Popen[bytes] | None = None

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
        waited = Client(self.base_url).wait_ready(ready_timeout_s, self.alive)
        say(f"  server ready after {waited:.0f}s (pid {self.pid}, log {self.log})")
        return waited

    def stop(self, grace_s: float = 30) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = os.getpgid(self.proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # engine workers share the group; let them go
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
