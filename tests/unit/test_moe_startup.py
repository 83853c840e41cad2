"""MOE_TACTICS at start: autotune results kept in the state volume under the image's build id; a table that
fits is handed to vLLM with autotuning off; one that does not refuses the start naming the mismatch, or
autotunes when MOE_TACTICS_FALLBACK=autotune."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkserve.serving import __main__ as entry
from sparkserve.serving import flags
from sparkserve.serving.moe import startup, state, tactics
from sparkserve.serving.moe import table as tables
from sparkserve.serving.moe.shape import GPT_OSS_120B
from sparkserve.serving.profile import ProfileError, parse
from sparkserve.supply.patches import manifest

from .test_serving_model import COMPLETE, ROOT, ContainerEnv, cache_snapshot

SPARK = {"SPARKSERVE_TARGET": "spark", "MODEL": "openai/gpt-oss-120b"}


def site_with(tmp_path: Path, flashinfer: list[tuple[str, str]]) -> Path:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    manifest.write(site / manifest.SITE_MANIFEST, {
        "flashinfer": {"version": "0.7.2.post1", "form": "site", "patches": [
            {"id": i, "sha256": h, "code_sha256": h, "files": [], "summary": "", "gate": ""}
            for i, h in flashinfer]},
        "vllm": {"version": "0.33.0", "form": "site", "patches": []}})
    return site


def write_table(path: Path, patches: tuple[tuple[str, str], ...], cc: str = "12.1") -> Path:
    build = tables.Build("0.7.2.post1", patches, tactics.SM120_MXFP8_MXFP4, (6, 12), cc)
    entries = (tables.Entry(1, 4, 13, "128x32x128 swap_ab", "128x32x128 swap_ab"),
               tables.Entry(8192, 0, 9, "128x128x128 no_swap", "x"))
    t = tables.Table(build, GPT_OSS_120B, entries, "NVIDIA GB10")
    return tables.write(t, path)


@pytest.fixture
def no_gpu_fi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_flashinfer_version", lambda: "0.7.2.post1")
    monkeypatch.setattr(startup, "_compute_capability", lambda: "12.1")
    monkeypatch.delenv(state.AUTOTUNE_ENV, raising=False)


def test_autotune_is_kept_under_the_build_id(tmp_path: Path, no_gpu_fi: None) -> None:
    p = parse({**SPARK, "SPARKSERVE_STATE_DIR": str(tmp_path / "state")})
    site = site_with(tmp_path, [("0001-a", "1" * 64)])
    first = startup.prepare(p, site, "12.1a")
    root = Path(first.env[state.AUTOTUNE_ENV])
    assert root.parent == tmp_path / "state" / state.AUTOTUNE_DIR
    assert root.name == state.build_id(site, "12.1a") and len(root.name) == 16
    assert "nothing stored yet" in first.lines[0]
    assert "--no-enable-flashinfer-autotune" not in flags.vllm_argv(first.profile)
    (root / "v2" / "env" / "entries").mkdir(parents=True)
    (root / "v2" / "env" / "entries" / "x.json").write_text("{}")
    again = startup.prepare(p, site, "12.1a")
    assert "1 stored file(s) found: tuned buckets are not profiled again" in again.lines[0]


def test_build_id_follows_patches_and_archs(tmp_path: Path) -> None:
    a = state.build_id(site_with(tmp_path, [("0001-a", "1" * 64)]), "12.1a 12.0f")
    assert a == state.build_id(site_with(tmp_path, [("0001-a", "1" * 64)]), "12.1a  12.0f")
    two = site_with(tmp_path, [("0001-a", "1" * 64), ("0002-b", "2" * 64)])
    assert a != state.build_id(two, "12.1a 12.0f")
    assert a != state.build_id(site_with(tmp_path, [("0001-a", "1" * 64)]), "12.1a")


def test_not_flashinfer_cutlass(tmp_path: Path) -> None:
    s = startup.prepare(parse({**SPARK, "MOE_BACKEND": "marlin"}), None, "12.1a")
    assert s.env == {} and "does not apply" in s.lines[0]


def test_a_fitting_table_turns_autotune_off(tmp_path: Path, no_gpu_fi: None) -> None:
    patches = (("0001-a", "1" * 64),)
    site = site_with(tmp_path, list(patches))
    table = write_table(tmp_path / "state" / state.TABLE_FILE, patches)
    p = parse({**SPARK, "MOE_TACTICS": "table", "SPARKSERVE_STATE_DIR": str(tmp_path / "state")})
    s = startup.prepare(p, site, "12.1a")
    assert s.env == {state.TABLE_ENV: str(table)}
    assert "--no-enable-flashinfer-autotune" in flags.vllm_argv(s.profile)
    assert any("1 tokens: gemm1 #4 128x32x128 swap_ab" in line for line in s.lines)


def test_a_table_of_another_build_refuses_or_falls_back(tmp_path: Path, no_gpu_fi: None) -> None:
    site = site_with(tmp_path, [("0001-a", "1" * 64), ("0002-tiles", "2" * 64)])
    table = write_table(tmp_path / "t.json", (("0001-a", "1" * 64),), cc="12.0")
    env = {**SPARK, "MOE_TACTICS": "table", "MOE_TACTICS_TABLE": str(table),
           "SPARKSERVE_STATE_DIR": str(tmp_path / "state")}
    with pytest.raises(ProfileError) as info:
        startup.prepare(parse(env), site, "12.1a")
    msg = str(info.value)
    assert msg.startswith("MOE_TACTICS='table'") and "FlashInfer patches" in msg and "this GPU is 12.1" in msg
    assert "MOE_TACTICS_FALLBACK=autotune" in msg
    s = startup.prepare(parse({**env, "MOE_TACTICS_FALLBACK": "autotune"}), site, "12.1a")
    assert s.profile.moe_tactics == "autotune"
    assert state.AUTOTUNE_ENV in s.env and state.TABLE_ENV not in s.env
    assert "autotuning instead" in s.warnings[0]
    assert "--no-enable-flashinfer-autotune" not in flags.vllm_argv(s.profile)


def test_a_missing_table_is_named(tmp_path: Path, no_gpu_fi: None) -> None:
    p = parse({**SPARK, "MOE_TACTICS": "table", "SPARKSERVE_STATE_DIR": str(tmp_path)})
    with pytest.raises(ProfileError, match="cannot read the tactic table"):
        startup.prepare(p, None, "12.1a")


def test_entrypoint_print_flags_shows_the_tactic_source(tmp_path: Path, no_gpu_fi: None,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # a container's environment, with the model in its cache (the preflight checks it last)
    env = ContainerEnv(PATH="/usr/bin:/bin", SPARKSERVE_ROOT=str(ROOT), HF_HOME=str(tmp_path / "hf"))
    env.update({**SPARK, "MOE_TACTICS": "table", "SPARKSERVE_STATE_DIR": str(tmp_path),
                "MXFP4_LAYERS": "moe"})
    monkeypatch.setattr(entry.os, "environ", env)
    cache_snapshot(tmp_path / "hf" / "hub", "openai/gpt-oss-120b", COMPLETE)
    assert entry.main(["--print-flags"]) == 2  # no table installed: refused before vLLM
    assert "cannot read the tactic table" in capsys.readouterr().err
    write_table(tmp_path / state.TABLE_FILE, ())
    monkeypatch.setattr(entry.banner, "site_packages", lambda module="vllm": None)
    assert entry.main(["--print-flags"]) == 0
    out = capsys.readouterr().out
    assert "MoE tactics: table" in out and "--no-enable-flashinfer-autotune" in out
    assert json.loads((tmp_path / state.TABLE_FILE).read_text())["kind"] == tables.KIND
