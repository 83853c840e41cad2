"""The release workflow (.github/workflows/release.yml) is a valid GitHub Actions workflow (GitHub's
schema, vendored by PyPI's check-jsonschema: works offline; actionlint's PyPI wrapper downloads its
binary from GitHub when installed, which this project's machines cannot reach) and runs the release as
docs/RELEASE.md says: each platform built on a runner of its own arch, smoke-tested, then pushed with
scripts/build-image.sh, and the multi-platform tag made only after both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, check=False, timeout=120)


def load() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    # YAML 1.1 reads the key `on` as True
    return data


def test_the_workflow_passes_githubs_schema(tmp_path: Path) -> None:
    r = schema_check(WORKFLOW)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "release.yml"
    text = WORKFLOW.read_text()
    assert "runs-on: ${{ matrix.runner }}" in text
    broken.write_text(text.replace("runs-on: ${{ matrix.runner }}", "runs_on: ${{ matrix.runner }}"))
    assert schema_check(broken).returncode != 0, "the schema check accepts a job without runs-on"


def steps(job: dict[str, Any]) -> list[str]:
    return [str(s.get("run", s.get("uses", ""))) for s in job["steps"]]


def test_each_platform_is_built_natively_smoke_tested_then_pushed() -> None:
    image = load()["jobs"]["image"]
    matrix = image["strategy"]["matrix"]["include"]
    assert {m["platform"] for m in matrix} == {"linux/arm64", "linux/amd64"}
    for m in matrix:  # no emulation: the arm64 image's JIT modules compile on an arm64 machine
        assert ("arm" in m["runner"]) == (m["platform"] == "linux/arm64"), m
    assert image["runs-on"] == "${{ matrix.runner }}"
    runs = steps(image)
    build = next(i for i, r in enumerate(runs) if r.startswith("scripts/build-image.sh --platform"))
    smoke = next(i for i, r in enumerate(runs) if "/opt/ci-tests/image" in r)
    push = next(i for i, r in enumerate(runs) if "scripts/build-image.sh --push" in r)
    assert build < smoke < push
    assert "--no-build" in runs[push] and '--platform "${{ matrix.platform }}"' in runs[push]
    assert '--platform "${{ matrix.platform }}"' in runs[build]


def test_the_multi_platform_tag_comes_after_both_platforms() -> None:
    wf = load()
    index = wf["jobs"]["index"]
    assert index["needs"] == "image" and wf["jobs"]["image"]["strategy"]["fail-fast"] is True
    assert any("scripts/build-image.sh --merge" in r for r in steps(index))
    assert wf["permissions"] == {"contents": "read", "packages": "write"}
    assert set(wf[True]) == {"push", "workflow_dispatch"} and wf[True]["push"] == {"tags": ["v*"]}
