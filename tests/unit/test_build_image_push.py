"""scripts/build-image.sh --push/--merge orchestrates a release: each platform's image is checked against
this checkout before it is pushed under the tag that says the pins, and the multi-platform tag is made over
the one-platform ones; the reference printed is by digest. Run against a `docker` stand-in on PATH that
records every call (the real push is the release workflow's; the pull path is CI's serve-cpu phase)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

from sparkserve import provenance

ROOT = Path(__file__).resolve().parents[2]
REPO = "registry.example/sparkserve/serve"
TAG = provenance.tag(ROOT)
# the machine's own platform: no emulation is needed to build it
HERE = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}[platform.machine()]
ARCH = HERE.split("/")[1]

FAKE_DOCKER = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if args[:2] == ["image", "inspect"]:
    ref = args[-1]
    if ".Os" in args[3]:
        print(os.environ.get("FAKE_PLATFORM", "linux/amd64"))
    else:  # RepoDigests: the repository of the pushed tag
        print(ref.rsplit(":", 1)[0] + "@sha256:" + "ab" * 32)
elif args[:1] == ["run"]:
    sys.stdin.read()
    sys.exit(int(os.environ.get("FAKE_RUN_RC", "0")))
elif args[:3] == ["buildx", "imagetools", "inspect"]:
    print(json.dumps({"digest": "sha256:" + "cd" * 32,
                      "mediaType": "application/vnd.oci.image.index.v1+json"}))
'''


Run = tuple[subprocess.CompletedProcess[str], list[list[str]]]


def build_image(tmp_path: Path, *args: str, **env: str) -> Run:
    import json

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER)
    fake.chmod(0o755)
    log = tmp_path / "docker.log"
    log.unlink(missing_ok=True)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build-image.sh"), *args], cwd=ROOT,
                       capture_output=True, text=True, check=False, timeout=120,
                       env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(log),
                            "FAKE_PLATFORM": HERE, **env})
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r, calls


def verbs(calls: list[list[str]]) -> list[str]:
    return [c[0] if c[0] not in ("image", "buildx") else " ".join(c[:3] if c[0] == "buildx" else c[:2])
            for c in calls]


def test_one_platform_is_built_with_its_provenance_checked_then_pushed(tmp_path: Path) -> None:
    r, calls = build_image(tmp_path, "--push", REPO, "--platform", HERE)
    assert r.returncode == 0, r.stderr
    ref = f"{REPO}:{TAG}-{ARCH}"
    assert verbs(calls) == ["build", "image inspect", "run", "push", "image inspect"]
    build = calls[0]
    assert build[build.index("--platform") + 1] == HERE and build[build.index("-t") + 1] == ref
    labels = [build[i + 1] for i, a in enumerate(build) if a == "--label"]
    assert labels == [f"{k}={v}" for k, v in provenance.labels(ROOT).items()]
    check = calls[2]  # the checkout's rules in the image, against the checkout's record
    assert check[check.index("--entrypoint") + 1] == "/opt/venv/bin/python" and "check-image" in check
    assert ref in check and "--expected-json" in check
    assert calls[3] == ["push", ref]
    assert f"pushed {ref}@sha256:{'ab' * 32}" in r.stdout
    assert not any(c[0] == "buildx" for c in calls)  # one platform: no multi-platform tag


def test_the_image_built_before_is_pushed_without_a_build(tmp_path: Path) -> None:
    r, calls = build_image(tmp_path, "--push", REPO, "--platform", HERE, "--no-build")
    assert r.returncode == 0, r.stderr
    ref = f"{REPO}:{TAG}-{ARCH}"
    assert verbs(calls) == ["image inspect", "run", "tag", "push", "image inspect"]
    assert "localhost/sparkserve/serve:latest" in calls[1]  # the image built before is what is checked
    assert calls[2] == ["tag", "localhost/sparkserve/serve:latest", ref] and calls[3] == ["push", ref]


def test_an_image_of_another_platform_is_not_pushed(tmp_path: Path) -> None:
    other = "linux/arm64" if HERE == "linux/amd64" else "linux/amd64"
    r, calls = build_image(tmp_path, "--push", REPO, "--platform", HERE, "--no-build", FAKE_PLATFORM=other)
    assert r.returncode != 0 and f"is {other}, not {HERE}" in r.stderr
    assert "push" not in verbs(calls) and "tag" not in verbs(calls)


def test_an_image_that_is_not_this_checkouts_build_is_not_pushed(tmp_path: Path) -> None:
    r, calls = build_image(tmp_path, "--push", REPO, "--platform", HERE, FAKE_RUN_RC="10")
    assert r.returncode != 0 and "run" in verbs(calls) and "push" not in verbs(calls)


def test_the_multi_platform_tag_is_made_over_both_and_printed_by_digest(tmp_path: Path) -> None:
    r, calls = build_image(tmp_path, "--merge", REPO)
    assert r.returncode == 0, r.stderr
    create = next(c for c in calls if c[:3] == ["buildx", "imagetools", "create"])
    assert create[3:] == ["-t", f"{REPO}:{TAG}", f"{REPO}:{TAG}-arm64", f"{REPO}:{TAG}-amd64"]
    assert f"SPARKSERVE_IMAGE={REPO}:{TAG}@sha256:{'cd' * 32}" in r.stdout


@pytest.mark.parametrize("args", [["--no-build"], ["--push", REPO, "--no-build", "--platform",
                                                    "linux/arm64,linux/amd64"]])
def test_no_build_needs_one_platform_to_push(tmp_path: Path, args: list[str]) -> None:
    r, calls = build_image(tmp_path, *args)
    assert r.returncode == 2 and "--no-build pushes the image built before" in r.stderr
    assert "push" not in verbs(calls) and "build" not in verbs(calls)

