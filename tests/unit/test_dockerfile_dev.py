"""The dev container is the Dockerfile's `dev` target: it builds on the production image's `stack` stage,
so BuildKit takes the locked wheels from the production build's cache instead of downloading and installing
them a second time (scripts/ci/26-dev.sh checks the reuse in the build log), and nothing of it reaches the
serving image. The locked-wheel install is one script that both wheel stages run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stages(path: Path = ROOT / "Dockerfile") -> dict[str, str]:
    """{stage name: its instructions}, comments and blank lines dropped, from its FROM to the next FROM;
    continuation lines joined."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
    for line in text.replace("\\\n", " ").splitlines():
        m = re.match(r"FROM (?:--platform=\S+ )?\S+ AS ([\w-]+)$", line)
        if m:
            current = out.setdefault(m.group(1), [])
        if current is not None and line.strip():
            current.append(" ".join(line.split()))
    return {name: "\n".join(lines) for name, lines in out.items()}


def parents(name: str, all_stages: dict[str, str]) -> set[str]:
    """Every stage `name` is built from: its FROM chain and the stages it copies from, arch aliases
    resolved to all of their choices."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        text = all_stages[todo.pop()]
        base = re.match(r"FROM (?:--platform=\S+ )?(\S+) AS", text)
        assert base
        refs = [base.group(1), *re.findall(r"--from=(\S+)", text)]
        for ref in refs:
            pattern = re.escape(ref).replace(r"\$\{BUILDARCH\}", r"\w+").replace(r"\$\{TARGETARCH\}", r"\w+")
            for candidate in all_stages:
                if re.fullmatch(pattern, candidate) and candidate not in seen:
                    seen.add(candidate)
                    todo.append(candidate)
    return seen


def test_the_default_target_is_the_serving_image_and_dev_is_none_of_its_stages() -> None:
    all_stages = stages()
    assert list(all_stages)[-1] == "runtime", "a plain `docker build .` must build the serving image"
    runtime = parents("runtime", all_stages)
    assert {"stack", "patched", "jit", "base"} <= runtime, runtime
    assert "dev" not in runtime
    assert not any("dev" in parents(name, all_stages) for name in all_stages if name != "dev")


def test_the_dev_target_starts_from_stack_and_has_the_toolchain() -> None:
    dev = stages()["dev"]
    assert dev.startswith("FROM stack AS dev")
    for tool in ("cmake", "ccache", "gdb"):
        assert re.search(rf"\b{tool}\b", dev), tool
    assert "COPY locks/requirements-dev-linux-${TARGETARCH}-cp313.txt" in dev and "--require-hashes" in dev
    assert 'ENTRYPOINT ["/opt/venv/bin/python", "-m", "sparkserve", "dev", "enter", "--"]' in dev


def test_the_locked_wheel_install_is_one_script_run_by_both_wheel_stages() -> None:
    """`stack` (the image's lock) and `jit-cross-stack` (the build machine's) are the same instructions over
    their own lock: for a native build they are one cache record, and no other stage installs a lock."""
    all_stages = stages()
    script = "bash /tmp/install-lock.sh /tmp/lock.txt /tmp/requirements-sparkserve.txt"
    installers = {name for name, text in all_stages.items() if "install-lock.sh" in text}
    assert installers == {"stack", "jit-cross-stack"}
    stack, cross = (all_stages[n].split("\n", 1)[1] for n in ("stack", "jit-cross-stack"))
    assert script in stack
    assert cross == stack.replace("COPY --from=lock ", "COPY --from=build-lock ")
    assert not [n for n, text in all_stages.items() if "uv venv" in text]
    assert "uv venv" in (ROOT / "docker" / "install-lock.sh").read_text()


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
