"""Start-up caches per image build, the start summary read from real engine logs, and the supervisor that
replaced exec (output through, exit status back, signals forwarded)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkserve.serving import caches, supervise
from sparkserve.serving.startwatch import StartWatch

ROOT = Path(__file__).resolve().parents[2]
H100_STARTS = ROOT / "lab/results/nvidia-h100-80gb-hbm3/20261124T015130Z-start-times-hopper-h100"


def test_fresh_then_reused_and_other_builds_reported_not_used(tmp_path: Path) -> None:
    first = caches.prepare(tmp_path, "aaaa", {})
    assert first.state == "fresh" and first.folder == tmp_path / "aaaa"
    assert first.env["VLLM_CACHE_ROOT"] == str(tmp_path / "aaaa" / "vllm")
    assert caches.prepare(tmp_path, "aaaa", {}).state == "fresh"  # its empty folders hold nothing to reuse
    (tmp_path / "aaaa" / "vllm" / "model.bin").write_bytes(b"x" * 2_000_000)
    again = caches.prepare(tmp_path, "aaaa", {})
    assert again.state == "reused" and "reused (2 MB" in again.lines[0]
    other = caches.prepare(tmp_path, "bbbb", {})
    assert other.state == "fresh" and other.env["TRITON_CACHE_DIR"].startswith(str(tmp_path / "bbbb"))
    assert any("1 other image build(s)" in line and "aaaa" in line for line in other.lines)
    assert (tmp_path / "aaaa" / "vllm" / "model.bin").exists()  # kept for a rollback


def test_a_variable_set_in_the_environment_wins(tmp_path: Path) -> None:
    plan = caches.prepare(tmp_path, "aaaa", {"TRITON_CACHE_DIR": "/elsewhere"})
    assert "TRITON_CACHE_DIR" not in plan.env
    assert any("TRITON_CACHE_DIR=/elsewhere" in line for line in plan.lines)


def test_unwritable_names_the_path_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "vol").write_text("not a folder")
    with pytest.raises(caches.CacheError, match=r"vol is not writable.*chown.*docker volume rm"):
        caches.prepare(tmp_path / "vol", "aaaa", {})


def _summary(log: Path) -> list[str]:
    watch = StartWatch(0.0)
    out: list[str] = []
    for i, line in enumerate(log.read_text(errors="replace").splitlines()):
        out += watch.feed(line, float(i))
    return out


def test_summary_of_the_h100_first_start_says_compiled() -> None:
    s = _summary(H100_STARTS / "start-1.log")
    assert s[0].startswith("sparkserve: start summary: ready in ")
    assert "  weights: 16.3 s" in s
    assert "  torch.compile: 38.9 s, compiled (stored in the compile cache for the next start)" in s
    assert "  CUDA graphs: 24 + 6 s" in s


def test_summary_of_the_h100_second_start_says_loaded_from_the_cache() -> None:
    s = _summary(H100_STARTS / "start-2.log")
    assert "  torch.compile: 0.23 s, loaded from the compile cache" in s
    assert "  weights: 8.1 s" in s


def test_summary_comes_once_at_ready() -> None:
    w = StartWatch(10.0)
    assert w.feed("2026 - INFO - [Autotuner]: Autotuning process starts ...", 11.0) == []
    assert w.feed("2026 - INFO - [Autotuner]: Autotuning process ends", 13.5) == []
    lines = w.feed("INFO:     Application startup complete.", 30.0)
    assert lines[0] == "sparkserve: start summary: ready in 20.0 s"
    assert "  FlashInfer autotune: 2.5 s" in lines
    assert "  torch.compile: not run (eager, or no compile line seen)" in lines
    assert w.feed("INFO:     Application startup complete.", 31.0) == []


def test_supervise_passes_output_and_returns_the_exit_code(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    code = "print('one'); print('Application startup complete'); import sys; sys.exit(3)"
    seen: list[str] = []

    def on_line(line: str, now: float) -> list[str]:
        seen.append(line)
        return ["SUMMARY"] if "startup complete" in line else []

    assert supervise.run([sys.executable, "-c", code], on_line) == 3
    out = capfdbinary.readouterr().out.decode()
    assert out == "one\nApplication startup complete\nSUMMARY\n"
    assert seen == ["one\n", "Application startup complete\n"]


def test_supervise_forwards_sigterm() -> None:
    """The entrypoint as a process of its own (as in the container): SIGTERM reaches vLLM's process and
    its status comes back."""
    child = "import time; print('up', flush=True); time.sleep(60)"
    code = ("import sys; from sparkserve.serving import supervise; "
            f"sys.exit(supervise.run([sys.executable, '-c', {child!r}], lambda line, now: []))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize(("mode", "owner", "group", "uid", "gids", "ok"), [
    (0o755, 10001, 10001, 10001, {10001}, True),   # the image's own volume
    (0o555, 10001, 10001, 10001, {10001}, False),  # its own, but read-only bits
    (0o755, 0, 0, 10001, {10001}, False),          # left by an older image running as root
    (0o775, 0, 10001, 10001, {10001}, True),       # group-writable
    (0o777, 0, 0, 10001, {10001}, True),
    (0o700, 5, 5, 0, {0}, True),                   # root writes anything
])
def test_write_permission_from_the_bits_alone(mode: int, owner: int, group: int, uid: int, gids: set[int],
                                              ok: bool) -> None:
    assert caches.permits_write(mode, owner, group, uid, gids) is ok


def test_the_preflight_refuses_a_volume_another_user_owns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    vol = tmp_path / "cache"
    vol.mkdir(mode=0o755)
    st = vol.stat()
    caches.check_owner(tmp_path / "not-there-yet", "sparkserve-cache")  # the first start makes it
    monkeypatch.setattr(os, "getuid", lambda: st.st_uid + 1)
    monkeypatch.setattr(os, "getgid", lambda: st.st_gid + 1)
    monkeypatch.setattr(os, "getgroups", lambda: [st.st_gid + 1])
    fix = r"cache is not writable by uid .*--cap-add CHOWN.*chown serve -R"
    with pytest.raises(caches.CacheError, match=fix):
        caches.check_owner(vol, "sparkserve-cache")
    with pytest.raises(caches.CacheError) as exc:
        caches.check_owner(vol, "sparkserve-state", removable=False)
    assert "docker volume rm" not in str(exc.value)
