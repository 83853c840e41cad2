"""The env-file reader of the harness and the entrypoint: compose's rules, on the cases that
tests/deploy/test_envfile_compose.py checks against docker compose itself."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.serving import envfile, profiles

ROOT = Path(__file__).resolve().parents[2]
CASES = tomllib.loads((ROOT / "tests/data/envfile-cases.toml").read_text())["case"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_env_files_read_as_compose_reads_them(case: dict[str, Any]) -> None:
    if "refuse" in case:
        with pytest.raises(envfile.EnvFileError) as info:
            envfile.parse(case["text"], case.get("lookup"))
        assert case["refuse"] in str(info.value) and str(info.value).startswith("line ")
    else:
        assert envfile.parse(case["text"], case.get("lookup")) == case["expect"]


def test_every_case_says_what_compose_reads() -> None:
    for case in CASES:
        assert ("expect" in case) != ("refuse" in case), case["name"]
        if "refuse" in case:
            assert ("compose" in case) != ("compose_error" in case), case["name"]
        assert case["text"].endswith("\n"), case["name"]


def test_a_quoted_value_is_measured_as_compose_deploys_it(tmp_path: Path) -> None:
    """GPU_MEMORY_UTILIZATION="0.7" was a ProfileError for the harness and 0.7 for compose."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.env").write_text('SPARKSERVE_PROFILE=mine\nGPU_MEMORY_UTILIZATION="0.7"\n')
    assert profiles.resolve("mine", tmp_path).profile.gpu_memory_utilization == 0.7


def test_a_bad_line_names_the_file_and_the_line(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.env").write_text('SPARKSERVE_PROFILE=bad\nMODEL="openai/gpt-oss-120b\n')
    with pytest.raises(SparkserveError, match=r"bad\.env: line 2: unterminated quoted value"):
        profiles.resolve("bad", tmp_path)
