"""Speculative decoding as a profile choice: the --speculative-config the variables build, their refusals,
the override guard, the draft checks before vLLM starts (present, fitting the target), the download of the
draft, and the entrypoint's exit codes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from sparkserve_lab.testing import eagle3_dummy
from sparkserve_lab.testing.gptoss_dummy import gpt_oss_config

from sparkserve.serving import __main__ as entry
from sparkserve.serving import (
    download,
    draft,
    envfile,
    flags,
    model,
    overrides,
    preflight,
    speculative,
    supervise,
)
from sparkserve.serving.checkpoint import name_says_gpt_oss
from sparkserve.serving.profile import Profile, ProfileError, parse
from tests.unit.test_serving_model import COMPLETE, SHA, ContainerEnv, FakeHub, cache_snapshot, expected_of
from tests.unit.test_settings import stand_in_parser

ROOT = Path(__file__).resolve().parents[2]
TARGET = gpt_oss_config("120b")
DRAFT = eagle3_dummy.eagle3_config()
GUARDED = "set SPECULATIVE, SPECULATIVE_TOKENS and SPECULATIVE_DRAFT instead"


def resolve(env: dict[str, str]) -> Profile:
    """Speculation is refused with MXFP4 dense layers (the last test): these cases use MoE-only MXFP4."""
    if "SPECULATIVE" in env and "MXFP4_LAYERS" not in env and "MODEL" not in env:
        env = {"MXFP4_LAYERS": "moe", **env}
    return parse(env, gpt_oss=name_says_gpt_oss)


def spec_config(p: Profile) -> dict[str, object] | None:
    argv = flags.vllm_argv(p, python="py")
    if "--speculative-config" not in argv:
        return None
    return dict(json.loads(argv[argv.index("--speculative-config") + 1]))


# --- the flag ---------------------------------------------------------------------------------------------

def test_off_by_default_emits_nothing() -> None:
    p = resolve({})
    assert p.speculative == "off" and p.speculative_tokens is None and p.speculative_draft == ""
    assert spec_config(p) is None


def test_eagle3_defaults_to_the_published_draft_and_three_tokens() -> None:
    # the keys are vLLM 0.33.0's SpeculativeConfig fields
    assert spec_config(resolve({"SPECULATIVE": "eagle3"})) == {
        "method": "eagle3", "model": "nvidia/gpt-oss-120b-Eagle3-v2", "num_speculative_tokens": 3}


def test_the_draft_free_method_names_no_model() -> None:
    assert spec_config(resolve({"SPECULATIVE": "ngram", "SPECULATIVE_TOKENS": "5"})) == {
        "method": "ngram", "num_speculative_tokens": 5}


def test_a_draft_folder_and_a_token_count_reach_vllm() -> None:
    cfg = spec_config(resolve({"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": "/models/draft",
                               "SPECULATIVE_TOKENS": "6"}))
    assert cfg == {"method": "eagle3", "model": "/models/draft", "num_speculative_tokens": 6}


def test_the_measurement_switch_is_synthetic_rejection_sampling() -> None:
    cfg = spec_config(resolve({"SPECULATIVE": "eagle3", "SPECULATIVE_TOKENS": "4", "LOAD_FORMAT": "dummy",
                               "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "5"}))
    assert cfg is not None
    assert cfg["rejection_sample_method"] == "synthetic" and cfg["synthetic_acceptance_length"] == 5.0


# --- refusals ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "message"), [
    ({"SPECULATIVE": "medusa"}, r"SPECULATIVE='medusa': must be one of off, eagle3, ngram$"),
    ({"SPECULATIVE": "eagle3", "SPECULATIVE_TOKENS": "0"}, r"SPECULATIVE_TOKENS='0': must be from 1 to 8"),
    ({"SPECULATIVE": "eagle3", "SPECULATIVE_TOKENS": "9"}, r"SPECULATIVE_TOKENS='9': must be from 1 to 8"),
    ({"SPECULATIVE": "ngram", "SPECULATIVE_TOKENS": "two"}, r"must be a whole number"),
    ({"SPECULATIVE_TOKENS": "3"}, r"SPECULATIVE_TOKENS='3': counts speculative tokens, and SPECULATIVE=off"),
    ({"SPECULATIVE": "ngram", "SPECULATIVE_DRAFT": "org/draft"},
     r"is the Eagle3 draft model .*SPECULATIVE=ngram; remove the line"),
    ({"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": "draft"},
     r"neither an absolute folder .* nor a Hugging Face"),
    ({"SPECULATIVE": "eagle3", "MODEL": "/models/llama", "MXFP4_LAYERS": "none"},
     r"the default draft is gpt-oss-120b's, and MODEL=/models/llama is not gpt-oss"),
])
def test_bad_speculation_values_are_refused_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        resolve(env)


def test_the_measurement_switch_is_refused_in_a_serving_profile() -> None:
    for name in ("spark", "hopper-h100", "desktop-sm120"):
        shipped = envfile.read(ROOT / "profiles" / f"{name}.env", {})
        with pytest.raises(ProfileError, match=r"measurement only: .*refused in a serving profile"):
            resolve({**shipped, "MXFP4_LAYERS": "moe", "SPECULATIVE": "eagle3",
                     "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "4"})


@pytest.mark.parametrize(("env", "message"), [
    ({"LOAD_FORMAT": "dummy", "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "2"}, r"and SPECULATIVE=off"),
    ({"LOAD_FORMAT": "dummy", "SPECULATIVE": "ngram", "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "4.5"},
     r"from 1 \(no draft token accepted\) to 4 \(all SPECULATIVE_TOKENS=3 of them\)"),
    ({"LOAD_FORMAT": "dummy", "SPECULATIVE": "ngram", "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "0.5"},
     r"must be off or a number of at least 1"),
    ({"LOAD_FORMAT": "dummy", "SPECULATIVE": "ngram", "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "nan"},
     r"must be off or a number of at least 1"),
])
def test_the_measurement_switch_is_bounded(env: dict[str, str], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        resolve(env)


def test_the_measurement_switch_off_is_the_default() -> None:
    p = resolve({"SPECULATIVE": "ngram", "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "off"})
    assert p.speculative_synthetic_acceptance is None
    assert "rejection_sample_method" not in (spec_config(p) or {})


# --- extra arguments cannot turn it on, off or around -----------------------------------------------------

@pytest.mark.parametrize("extra", [
    '--speculative-config {"method":"ngram","num_speculative_tokens":8}',
    "-sc {}", '-sc={"method":"ngram"}', "--speculative-config.num_speculative_tokens=8",
    "--spec-method ngram", "--spec_method ngram", "--spec-model org/other", "--spec-tokens 8", "--spec 3",
])
@pytest.mark.parametrize("base", [{}, {"SPECULATIVE": "eagle3"}])
def test_extra_args_cannot_set_speculation(extra: str, base: dict[str, str]) -> None:
    with pytest.raises(ProfileError, match=GUARDED):
        resolve({**base, "VLLM_EXTRA_ARGS": extra})


def test_with_vllms_parser_a_changed_speculative_config_is_refused_and_the_same_passes() -> None:
    parser = stand_in_parser()
    parser.add_argument("--speculative-config", "-sc", type=json.loads)
    parser.add_argument("--spec-method")
    parser.add_argument("--spec-model")
    parser.add_argument("--spec-tokens", type=int)
    p = resolve({"SPECULATIVE": "eagle3", "SPARKSERVE_TARGET": "hopper"})
    with pytest.raises(ProfileError, match=r"vLLM reads spec_tokens=5 where the profile gives None"):
        overrides.check_with_parser(parser, ["--spec-tokens", "5"], "VLLM_EXTRA_ARGS", p)
    six = json.dumps((spec_config(p) or {}) | {"num_speculative_tokens": 6})
    with pytest.raises(ProfileError, match=r"config\.num_speculative_tokens=6 where the profile gives 3"):
        overrides.check_with_parser(parser, ["-sc", six], "VLLM_EXTRA_ARGS", p)
    overrides.check_with_parser(parser, ["-sc", json.dumps(spec_config(p))], "VLLM_EXTRA_ARGS", p)


# --- the draft's shape against the target's ---------------------------------------------------------------

def test_the_published_draft_shape_fits_gpt_oss_120b() -> None:
    assert speculative.fit_problems(TARGET, DRAFT) == []


@pytest.mark.parametrize(("change", "problem"), [
    ({"vocab_size": 128256}, "vocabulary: the draft's vocab_size is 128256, the target's 201088"),
    ({"hidden_size": 4096},
     "hidden size: the draft reads hidden states of width 4096, the target's hidden_size is 2880"),
    ({"target_hidden_size": 2048}, "hidden size: the draft reads hidden states of width 2048"),
    ({"draft_vocab_size": 300000}, "draft_vocab_size 300000 exceeds its vocab_size 201088"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 17, 40]}},
     "layers: the draft reads the target's layers [1, 17, 40], the target has 36"),
    ({"vocab_size": None}, "the draft's config.json has no vocab_size"),
])
def test_a_draft_that_does_not_fit_says_why(change: dict[str, object], problem: str) -> None:
    cfg = {**DRAFT, **change}
    problems = speculative.fit_problems(TARGET, {k: v for k, v in cfg.items() if v is not None})
    assert any(problem in p for p in problems), problems


def test_the_20b_target_does_not_take_the_120b_draft_layers() -> None:
    assert speculative.fit_problems(gpt_oss_config("20b"), DRAFT) == [
        "layers: the draft reads the target's layers [1, 17, 33], the target has 24"]


# --- the draft before vLLM starts -------------------------------------------------------------------------

def folder(path: Path, cfg: dict[str, object]) -> str:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def test_a_config_only_draft_serves_random_weights_and_fits(tmp_path: Path) -> None:
    target = folder(tmp_path / "t", TARGET)
    d = str(eagle3_dummy.make(tmp_path / "d"))
    p = resolve({"MODEL": target, "SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": d, "LOAD_FORMAT": "dummy"})
    line = draft.check(p, {})
    assert line is not None and "random weights" in line
    assert "fits MODEL (vocab_size 201088, hidden_size 2880)" in line


def test_a_config_only_draft_without_dummy_weights_lacks_weights(tmp_path: Path) -> None:
    p = resolve({"MODEL": folder(tmp_path / "t", TARGET), "SPECULATIVE": "eagle3",
                 "SPECULATIVE_DRAFT": str(eagle3_dummy.make(tmp_path / "d"))})
    with pytest.raises(model.ModelMissing, match=r"SPECULATIVE_DRAFT=.*not a complete draft; it lacks weig"):
        draft.check(p, {})


def test_a_misfit_draft_is_refused_naming_both(tmp_path: Path) -> None:
    target = folder(tmp_path / "t", TARGET)
    d = folder(tmp_path / "d", {**DRAFT, "vocab_size": 128256, "hidden_size": 4096})
    p = resolve({"MODEL": target, "SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": d, "LOAD_FORMAT": "dummy"})
    with pytest.raises(ProfileError) as info:
        draft.check(p, {})
    text = str(info.value)
    assert text.startswith(f"SPECULATIVE_DRAFT='{d}': does not fit MODEL={target}: vocabulary")
    assert f"{d}/config.json" in text and f"{target}/config.json" in text and "hidden size" in text


def test_a_draft_missing_offline_says_how_to_get_it(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path)}
    cache_snapshot(tmp_path / "hub", "openai/gpt-oss-120b", COMPLETE)
    p = resolve({"SPECULATIVE": "eagle3"})
    with pytest.raises(model.ModelMissing, match=r"the Eagle3 draft \(SPECULATIVE_DRAFT\): nvidia/gpt-oss-"
                                                 r"120b-Eagle3-v2 is not in the model cache.*--profile tools "
                                                 r"run --rm download"):
        draft.check(p, env)
    with pytest.raises(model.ModelMissing, match="no such folder in the container"):
        draft.check(resolve({"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": str(tmp_path / "none")}), env)


def test_draft_free_methods_need_no_draft() -> None:
    assert draft.check(resolve({"SPECULATIVE": "ngram"}), {}) == "ngram, 3 speculative tokens (draft-free)"
    assert draft.check(resolve({}), {}) is None


def test_a_measurement_says_so_in_the_log_line() -> None:
    line = draft.check(resolve({"SPECULATIVE": "ngram", "LOAD_FORMAT": "dummy",
                                "SPECULATIVE_SYNTHETIC_ACCEPTANCE": "4"}), {})
    assert line is not None and "MEASUREMENT ONLY: synthetic acceptance length 4" in line


# --- the download fetches the draft with the model --------------------------------------------------------

def test_the_download_fetches_and_verifies_the_draft_too(tmp_path: Path) -> None:
    hub = FakeHub(COMPLETE)
    got = download.run_all(resolve({"SPECULATIVE": "eagle3"}), {"HF_HOME": str(tmp_path)}, hub)
    assert [r for r, _ in got] == ["openai/gpt-oss-120b", "nvidia/gpt-oss-120b-Eagle3-v2"]
    assert [c[0] for c in hub.calls] == [r for r, _ in got]
    # a draft folder is not downloaded; ngram has no draft
    assert download.repos(resolve({"SPECULATIVE": "eagle3", "SPECULATIVE_DRAFT": "/models/d"})) == [
        "openai/gpt-oss-120b"]
    assert download.repos(resolve({"SPECULATIVE": "ngram"})) == ["openai/gpt-oss-120b"]


def test_a_corrupt_draft_download_fails_naming_the_draft(tmp_path: Path) -> None:
    class DraftBad(FakeHub):
        def download(self, repo_id: str, cache: Path, ignore: tuple[str, ...]) -> Path:
            self.served = {**COMPLETE, "model-00001-of-00002.safetensors": b"q" * 10} if "Eagle3" in repo_id \
                else self.files_
            return super().download(repo_id, cache, ignore)

    with pytest.raises(download.DownloadError, match=r"of nvidia/gpt-oss-120b-Eagle3-v2 do not match"):
        download.run_all(resolve({"SPECULATIVE": "eagle3"}), {"HF_HOME": str(tmp_path)}, DraftBad(COMPLETE))


# --- the entrypoint ---------------------------------------------------------------------------------------

@pytest.fixture
def container(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ContainerEnv:
    env = ContainerEnv(PATH="/usr/bin:/bin", SPARKSERVE_ROOT=str(ROOT), HF_HOME=str(tmp_path / "hf"),
                       MXFP4_LAYERS="moe", SPARKSERVE_CACHE_DIR=str(tmp_path / "cache"),
                       SPARKSERVE_STATE_DIR=str(tmp_path / "state"), SPARKSERVE_PROFILE="hopper-h100",
                       SPECULATIVE="eagle3")
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(preflight, "check_gpu", lambda p, archs, env: [])
    monkeypatch.setattr(supervise, "run", lambda *a, **k: pytest.fail("vLLM must not start"))
    hub = tmp_path / "hf" / "hub"
    cache_snapshot(hub, "openai/gpt-oss-120b", {**COMPLETE, "config.json": json.dumps(TARGET).encode()})
    return env


def draft_in_cache(tmp_path: Path, cfg: dict[str, object]) -> None:
    cache_snapshot(tmp_path / "hf" / "hub", speculative.DEFAULT_EAGLE3_DRAFT,
                   {**COMPLETE, "config.json": json.dumps(cfg).encode()})


def test_print_flags_with_eagle3(container: ContainerEnv, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    draft_in_cache(tmp_path, DRAFT)
    assert entry.main(["--print-flags"]) == 0
    out = capsys.readouterr().out
    assert ("--speculative-config "
            "'{\"method\":\"eagle3\",\"model\":\"nvidia/gpt-oss-120b-Eagle3-v2\","
            "\"num_speculative_tokens\":3}'"
            in out)
    assert ("  speculative: eagle3, 3 speculative tokens, draft nvidia/gpt-oss-120b-Eagle3-v2 from the cache"
            in out)
    assert "fits MODEL (vocab_size 201088, hidden_size 2880)" in out


def test_a_misfit_draft_exits_2_and_a_missing_one_4(container: ContainerEnv, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.main(["--preflight"]) == preflight.EXIT_MODEL == 4
    assert "model not available: the Eagle3 draft (SPECULATIVE_DRAFT)" in capsys.readouterr().err
    draft_in_cache(tmp_path, {**DRAFT, "hidden_size": 4096})
    assert entry.main(["--preflight"]) == preflight.EXIT_PROFILE == 2
    err = capsys.readouterr().err
    assert ("invalid serving profile: SPECULATIVE_DRAFT='nvidia/gpt-oss-120b-Eagle3-v2': does not fit MODEL"
            in err)


def test_suffix_decoding_is_not_offered(container: ContainerEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """The image has no arctic-inference, which vLLM's suffix decoding imports: a value it cannot serve is
    refused as any invalid value, naming the valid ones."""
    container["SPECULATIVE"] = "suffix"
    assert entry.main(["--preflight"]) == preflight.EXIT_PROFILE
    err = capsys.readouterr().err
    assert "invalid serving profile: SPECULATIVE='suffix': must be one of off, eagle3, ngram\n" in err


def test_the_download_mode_fetches_the_draft_and_checks_its_fit(container: ContainerEnv, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    container["HF_HUB_OFFLINE"] = "0"  # as compose's download service runs it
    files = {"openai/gpt-oss-120b": {**COMPLETE, "config.json": json.dumps(TARGET).encode()}}

    class Hub(FakeHub):
        def download(self, repo_id: str, cache: Path, ignore: tuple[str, ...]) -> Path:
            self.calls.append((repo_id, ignore))
            snap = cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / SHA
            return snap if snap.is_dir() else cache_snapshot(cache, repo_id, files[repo_id])

        def files(self, repo_id: str, revision: str) -> list[download.Expected]:
            return expected_of(files[repo_id])

    for draft_cfg, code in ((DRAFT, 0), ({**DRAFT, "vocab_size": 128256}, 2)):
        shutil.rmtree(tmp_path / "hf" / "hub" / "models--nvidia--gpt-oss-120b-Eagle3-v2", ignore_errors=True)
        files[speculative.DEFAULT_EAGLE3_DRAFT] = {**COMPLETE, "config.json": json.dumps(draft_cfg).encode()}
        hub = Hub(COMPLETE)
        monkeypatch.setattr(download, "HuggingFaceHub", lambda hub=hub: hub)
        assert entry.main(["--download"]) == code
        assert [c[0] for c in hub.calls] == ["openai/gpt-oss-120b", speculative.DEFAULT_EAGLE3_DRAFT]
        out, err = capsys.readouterr()
        if code == 0:
            assert "  draft: nvidia/gpt-oss-120b-Eagle3-v2 downloaded and verified" in out
            assert "fits MODEL (vocab_size 201088, hidden_size 2880)" in out
        else:
            assert "vocabulary: the draft's vocab_size is 128256, the target's 201088" in err


@pytest.mark.parametrize("layers", ["moe,qkv,o,lm_head", "moe,lm_head", "moe,o"])
@pytest.mark.parametrize("method", ["eagle3", "ngram"])
def test_speculation_with_mxfp4_dense_layers_is_refused_naming_the_record(layers: str, method: str) -> None:
    refused = (rf"SPECULATIVE='{method}': with MXFP4 .* did not keep greedy output the target's "
               r"\(lab/results/.*speculative-identity.*MXFP4_LAYERS=moe")
    with pytest.raises(ProfileError, match=refused):
        resolve({"SPECULATIVE": method, "MXFP4_LAYERS": layers})
    assert resolve({"SPECULATIVE": method, "MXFP4_LAYERS": "moe"}).speculative == method
    assert resolve({"MXFP4_LAYERS": layers}).speculative == "off"
    # the identity check that would lift the refusal serves random weights
    measuring = {"SPECULATIVE": method, "MXFP4_LAYERS": layers, "LOAD_FORMAT": "dummy"}
    assert resolve(measuring).speculative == method
