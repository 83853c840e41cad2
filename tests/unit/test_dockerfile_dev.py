"""Dockerfile.dev repeats the base, tools and stack stages of Dockerfile word for word: BuildKit then takes
them from the production build's cache, so the dev image reuses the production wheel layer (same locks,
same torch) instead of downloading and installing the stack again. scripts/ci/26-dev.sh checks the reuse
in the build log; this test keeps the copy from drifting."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("build-base", "tools", "lock-amd64", "lock-arm64", "lock", "stack")


def stages(path: Path) -> dict[str, str]:
    """{stage name: its instructions}, comments and blank lines dropped, from its FROM to the next FROM."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        m = re.match(r"FROM (?:--platform=\S+ )?\S+ AS ([\w-]+)$", line)
        if m:
            current = out.setdefault(m.group(1), [])
        if current is not None and line.strip() and not line.lstrip().startswith("#"):
            current.append(line)
    return {name: "\n".join(lines) for name, lines in out.items()}


def test_shared_stages_are_identical() -> None:
    prod, dev = stages(ROOT / "Dockerfile"), stages(ROOT / "Dockerfile.dev")
    for name in SHARED:
        assert dev[name] == prod[name], (
            f"stage {name} of Dockerfile.dev differs from Dockerfile's: copy it over, or the dev image "
            "stops reusing the production build's layers")
    def base_arg(path: Path) -> list[str]:
        """The global defaults of BASE_IMAGE and BUILD_BASE_IMAGE (the ARG lines before the first FROM)."""
        head = path.read_text().split("\nFROM ", 1)[0]
        return [ln for ln in head.splitlines() if ln.startswith("ARG BASE_IMAGE")]

    assert base_arg(ROOT / "Dockerfile.dev") == base_arg(ROOT / "Dockerfile")


def test_the_dev_stage_starts_from_stack_and_has_the_toolchain() -> None:
    dev = stages(ROOT / "Dockerfile.dev")["dev"]
    assert dev.startswith("FROM stack AS dev")
    for tool in ("cmake", "ccache", "gdb"):
        assert re.search(rf"\b{tool}\b", dev), tool
    assert "COPY locks/requirements-dev-linux-${TARGETARCH}-cp313.txt" in dev and "--require-hashes" in dev
    assert 'ENTRYPOINT ["/opt/venv/bin/python", "-m", "sparkserve", "dev", "enter", "--"]' in dev


def test_the_dev_locks_are_in_the_build_context() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!locks/requirements-dev-linux-*-cp313.txt" in ignore
    for arch in ("amd64", "arm64"):
        assert (ROOT / f"locks/requirements-dev-linux-{arch}-cp313.txt").is_file()


def test_every_platform_has_a_dev_lock_resolved_after_its_own() -> None:
    from sparkserve.supply import lock, pins

    p = pins.load(ROOT)
    files = [(platform.name, file, dev) for platform, file, dev in lock.lock_files(p)]
    assert files == [(name, f, dev) for name, lp in p.lock_platforms.items()
                     for f, dev in ((lp.file, False), (lp.dev_file, True))]
    assert "llama-benchy==0.4.0" in p.lock_dev_requirements
    for _, f, dev in files:
        text = (ROOT / f).read_text()
        if dev:  # the stack's versions are the constraints: none of them differs in the dev lock
            base = lock.pinned_versions((ROOT / f.replace("requirements-dev-", "requirements-")).read_text())
            assert all(base.get(n, v) == v for n, v in lock.pinned_versions(text).items())
            assert "llama-benchy==0.4.0" in text and "--hash=sha256:" in text
