"""`sparkserve profile check`: a serving profile validated on a host without Docker, a GPU or the patched
vLLM, its vLLM command printed, and what the host could not check said; exit 0 valid, 2 invalid."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sparkserve.cli.main import main
from sparkserve.serving import banner, preflight, profilecheck
from sparkserve.supply.patches import manifest

from .test_serving_model import COMPLETE, cache_snapshot

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "profiles").glob("*.env"))


@pytest.fixture(autouse=True)
def bare_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A host with no vLLM installed and an empty Hugging Face cache of its own."""
    monkeypatch.setattr(banner, "site_packages", lambda module="vllm": None)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return tmp_path


def command_of(out: str) -> list[str]:
    line = next(x for x in out.splitlines() if x.startswith("  command: "))
    return shlex.split(line.removeprefix("  command: "))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_is_valid_here_and_says_what_it_could_not_check(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m sparkserve.serving --preflight` on a checkout refused every shipped profile: the host's
    vLLM lacks the patch series."""
    assert main(["profile", "check", name]) == 0
    out, err = capsys.readouterr()
    assert command_of(out)[:3] == [profilecheck.IMAGE_PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
    unchecked = out.split("  not checked on this host:\n")[1]
    assert "    - the GPU: SPARKSERVE_TARGET=" in unchecked
    assert "    - the patch series: vLLM is not installed here" in unchecked
    assert ("    - the model files (MODEL=openai/gpt-oss-120b): not in this host's Hugging Face cache"
            in unchecked)
    assert f"profile check: {name} is valid as far as this host can check" in err


def test_the_gpu_line_names_the_series_kernels_a_profile_turns_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "check", "spark"]) == 0
    assert "own kernels" not in capsys.readouterr().out  # FlashInfer's CUTLASS MoE: none of the series'
    assert main(["profile", "check", "spark", "--set", "MOE_BACKEND=marlin-gemv",
                 "--set", "VLLM_ROUTER_GEMV_TOPK=1"]) == 0
    gpu = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("    - the GPU: "))
    assert ("the patch series' own kernels it turns on (MOE_BACKEND=marlin-gemv, VLLM_ROUTER_GEMV_TOPK=1) "
            "run only on compute capability 9.0, 12.0, 12.1;") in gpu


def test_overrides_reach_the_command_and_an_env_file_is_taken_by_its_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local = tmp_path / "local.env"
    local.write_text("MAX_NUM_SEQS=8\nMAX_MODEL_LEN=4096\n")
    assert main(["profile", "check", "spark", "--local-env", str(local), "--set", "MAX_NUM_SEQS=4"]) == 0
    argv = command_of(capsys.readouterr().out)
    assert argv[argv.index("--max-num-seqs") + 1] == "4" and argv[argv.index("--max-model-len") + 1] == "4096"
    mine = tmp_path / "mine.env"
    mine.write_text((ROOT / "profiles" / "spark.env").read_text().replace("=spark\n", "=mine\n", 1))
    assert main(["profile", "check", str(mine)]) == 0
    assert "  profile: mine (target spark" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "said"), [
    (["spark", "--set", "SPECULATIVE=suffix"], "SPECULATIVE='suffix': must be one of off, eagle3, ngram"),
    (["sprak"], "no serving profile 'sprak'"),
    (["spark", "--set", "GPU_MEMORY_UTILISATION=0.5"], "did you mean GPU_MEMORY_UTILIZATION?"),
    (["spark", "--set", "VLLM_EXTRA_ARGS=--max-model-len 10"], "set MAX_MODEL_LEN instead"),
    (["spark", "--set", "SPARKSERVE_PUBLISH_ADDRESS=0.0.0.0"], "without an API key"),
    (["spark", "--set", "MODEL=/models/x"], "MODEL's config.json is not on this host, so its name decided"),
])
def test_an_invalid_profile_exits_2_naming_the_variable(args: list[str], said: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "check", *args]) == preflight.EXIT_PROFILE == 2
    out, err = capsys.readouterr()
    assert "profile check: invalid serving profile: " in err and said in err and "command:" not in out


def test_a_patched_vllm_on_the_host_is_checked_like_the_images(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """In a dev container the series is there: its checks run instead of being listed as not run."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(banner, "site_packages", lambda module="vllm": site)
    manifest.write(site / manifest.SITE_MANIFEST, {"vllm": manifest.record("0.33.0", "site", [])})
    assert main(["profile", "check", "spark"]) == 2
    assert "lm_head needs the vLLM lm_head-MXFP4 patch" in capsys.readouterr().err
    assert main(["profile", "check", "spark", "--set", "MXFP4_LAYERS=moe,qkv,o"]) == 0
    assert "the patch series" not in capsys.readouterr().out


def test_what_the_host_has_of_the_model_is_checked(bare_host: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cache_snapshot(bare_host / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    assert main(["profile", "check", "spark"]) == 0
    out = capsys.readouterr().out
    assert "  model: openai/gpt-oss-120b from the cache" in out and "the model files" not in out
    assert "whether MODEL is gpt-oss" not in out  # its config.json is here
    folder = bare_host / "renamed"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    assert main(["profile", "check", "spark", "--set", f"MODEL={folder}"]) == 0  # gpt-oss by its config
    out = capsys.readouterr().out
    assert f"the model files (MODEL={folder}): on this host: MODEL={folder}: the folder is not a complete " \
           "model; it lacks weights" in out
