"""Serving profiles: every shipped profile parses; bad values fail naming the variable; flags are right."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sparkserve.serving import envfile, environment, flags, gpu, preflight
from sparkserve.serving.profile import ProfileError, check_extra_args, check_names, parse
from sparkserve.serving.settings import MXFP4_TOKENS, VARIABLES, guarded_flags
from sparkserve.supply.patches import manifest

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.env"))


def read_env(path: Path) -> dict[str, str]:
    return envfile.read(path)


def qcfg(argv: list[str]) -> dict[str, object]:
    return dict(json.loads(argv[argv.index("--quantization-config") + 1]))


def test_shipped_profiles_exist() -> None:
    names = {p.stem for p in PROFILES}
    assert {"spark", "spark-graph-safe", "desktop-sm120"} <= names


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_shipped_profile_parses(path: Path) -> None:
    env = read_env(path)
    p = parse(env)
    assert p.name == path.stem
    # Unified-memory cap unless the profile raises it explicitly (discrete-memory GPUs only).
    assert p.gpu_memory_utilization <= float(env.get("GPU_MEMORY_UTILIZATION_MAX", "0.80"))
    if p.target == "spark":
        assert "GPU_MEMORY_UTILIZATION_MAX" not in env
    argv = flags.vllm_argv(p, python="py")
    for flag in ("--reasoning-parser", "--tool-call-parser", "--enable-auto-tool-choice"):
        assert flag in argv
    if p.target in ("spark", "sm120"):
        assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--enforce-eager" not in argv












def test_cutlass_moe_only_on_sm12x_targets() -> None:
    with pytest.raises(ProfileError) as e:
        parse({"SPARKSERVE_TARGET": "hopper", "MOE_BACKEND": "cutlass-mxfp8"})
    assert e.value.variable == "MOE_BACKEND"
    assert "use marlin, triton or auto" in str(e.value)
    assert parse({"SPARKSERVE_TARGET": "hopper"}).moe_backend == "auto"
    assert parse({"SPARKSERVE_TARGET": "sm120"}).moe_backend == "cutlass-mxfp8"


def test_spark_profile_is_the_fast_one() -> None:
    p = parse(read_env(ROOT / "profiles" / "spark.env"))
    argv = flags.vllm_argv(p, python="py")
    assert p.mxfp4_layers == frozenset(MXFP4_TOKENS)
    assert qcfg(argv) == {"linear": "mxfp4", "lm_head": "mxfp4", "moe": {"activation": "mxfp8"}}
    assert argv[argv.index("--moe-backend") + 1] == "flashinfer_cutlass"
    assert argv[argv.index("--attention-backend") + 1] == "FLASHINFER"
    assert argv[argv.index("--linear-backend") + 1] == "marlin"
    assert argv[argv.index("--load-format") + 1] == "fastsafetensors"
    assert "--enable-prefix-caching" in argv


def test_graph_safe_profile_uses_marlin_moe() -> None:
    argv = flags.vllm_argv(parse(read_env(ROOT / "profiles" / "spark-graph-safe.env")), python="py")
    assert argv[argv.index("--moe-backend") + 1] == "marlin"
    assert "moe" not in qcfg(argv)  # no MXFP8 activations outside the CUTLASS path


@pytest.mark.parametrize(("layers", "expected"), [
    ("moe", None),
    ("moe,qkv", {"linear": "mxfp4", "ignore": ["*.o_proj"]}),
    ("moe,o", {"linear": "mxfp4", "ignore": ["*.qkv_proj"]}),
    ("moe,qkv,o", {"linear": "mxfp4"}),
    ("moe,lm_head", {"lm_head": "mxfp4"}),
    (" moe , o , lm_head ", {"linear": "mxfp4", "ignore": ["*.qkv_proj"], "lm_head": "mxfp4"}),
])
def test_mxfp4_layers_to_quantization_config(layers: str, expected: dict[str, object] | None) -> None:
    p = parse({"MXFP4_LAYERS": layers, "MOE_BACKEND": "marlin"})
    assert flags.quantization_config(p) == expected
    argv = flags.vllm_argv(p, python="py")
    assert ("--linear-backend" in argv) == (expected is not None)


@pytest.mark.parametrize(("env", "variable", "fragment"), [
    ({"MXFP4_LAYERS": "moe,qkvo"}, "MXFP4_LAYERS", "valid tokens: moe, qkv, o, lm_head"),
    ({"MXFP4_LAYERS": "moe,,o"}, "MXFP4_LAYERS", "empty entry"),
    ({"MXFP4_LAYERS": "moe,o,o"}, "MXFP4_LAYERS", "more than once"),
    ({"MXFP4_LAYERS": "qkv,o"}, "MXFP4_LAYERS", "cannot be left out"),
    ({"MODEL": "tiny-llama", "MXFP4_LAYERS": "moe"}, "MXFP4_LAYERS", "not gpt-oss"),
    ({"MOE_BACKEND": "cutlass"}, "MOE_BACKEND",
     "one of cutlass-mxfp8, cutlass-bf16, marlin, marlin-gemv, triton, auto"),
    ({"MOE_BACKEND": "cutlass-bf16"}, "MOE_BACKEND", "SM90 mixed-input GEMM"),
    ({"SPARKSERVE_TARGET": "hopper", "MOE_BACKEND": "cutlass-mxfp8"}, "MOE_BACKEND", "(or cutlass-bf16)"),
    ({"MOE_TACTICS": "tuned"}, "MOE_TACTICS", "one of autotune, table"),
    ({"MOE_TACTICS_FALLBACK": "yes"}, "MOE_TACTICS_FALLBACK", "one of refuse, autotune"),
    ({"MOE_TACTICS": "table", "MOE_BACKEND": "marlin"}, "MOE_TACTICS",
     "with MOE_BACKEND=marlin use autotune"),
    ({"MOE_TACTICS": "autotune", "VLLM_EXTRA_ARGS": "--no-enable-flashinfer-autotune"}, "VLLM_EXTRA_ARGS",
     "set MOE_TACTICS instead"),
    ({"MOE_TACTICS_TABLE": "moe-tactics.json"}, "MOE_TACTICS_TABLE", "absolute path"),
    ({"SPARKSERVE_STATE_DIR": "state"}, "SPARKSERVE_STATE_DIR", "absolute path"),
    ({"MODEL": "tiny-llama", "MOE_BACKEND": "marlin"}, "MOE_BACKEND", "no `moe`"),
    ({"ATTENTION_BACKEND": "FLASHINFER"}, "ATTENTION_BACKEND", "one of"),
    ({"KV_CACHE_DTYPE": "fp4"}, "KV_CACHE_DTYPE", "one of"),
    ({"CUDA_GRAPHS": "maybe"}, "CUDA_GRAPHS", "on or off"),
    ({"PREFIX_CACHING": "2"}, "PREFIX_CACHING", "on or off"),
    ({"GPU_MEMORY_UTILIZATION": "0.9"}, "GPU_MEMORY_UTILIZATION", "GPU_MEMORY_UTILIZATION_MAX"),
    ({"GPU_MEMORY_UTILIZATION": "75%"}, "GPU_MEMORY_UTILIZATION", "a number"),
    ({"GPU_MEMORY_UTILIZATION": "0"}, "GPU_MEMORY_UTILIZATION", "greater than 0"),
    ({"GPU_MEMORY_UTILIZATION": "nan"}, "GPU_MEMORY_UTILIZATION", "greater than 0"),
    ({"GPU_MEMORY_UTILIZATION_MAX": "0.99"}, "GPU_MEMORY_UTILIZATION_MAX", "at most 0.95"),
    ({"MAX_MODEL_LEN": "big"}, "MAX_MODEL_LEN", "whole number or auto"),
    ({"MAX_NUM_BATCHED_TOKENS": "0"}, "MAX_NUM_BATCHED_TOKENS", "at least 16"),
    ({"BLOCK_SIZE": "8"}, "BLOCK_SIZE", "one of 16, 32, 64"),
    ({"LOAD_FORMAT": "gguf"}, "LOAD_FORMAT", "one of"),
    ({"PARSERS": "harmony"}, "PARSERS", "one of"),
    ({"SPARKSERVE_TARGET": "gb10"}, "SPARKSERVE_TARGET", "one of spark, sm120, hopper, cpu"),
    ({"SPARKSERVE_PORT": "70000"}, "SPARKSERVE_PORT", "from 1 to 65535"),
    ({"VLLM_EXTRA_ARGS": "--foo 'bar"}, "VLLM_EXTRA_ARGS", "shell words"),
    ({"SPARKSERVE_TARGET": "cpu", "MODEL": "m", "ATTENTION_BACKEND": "flashinfer"},
     "ATTENTION_BACKEND", "cpu"),
    ({"SPARKSERVE_TARGET": "cpu"}, "MXFP4_LAYERS", "need a GPU"),
    ({"VLLM_FLASHINFER_SINK_DECODE": "trtllm"}, "VLLM_FLASHINFER_SINK_DECODE", "one of auto, xqa, fa2"),
])
def test_invalid_values_name_the_variable(env: dict[str, str], variable: str, fragment: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse(env)
    assert info.value.variable == variable
    assert str(info.value).startswith(f"{variable}=")
    assert fragment in str(info.value)


def test_gpu_memory_cap_can_be_raised_explicitly() -> None:
    p = parse({"GPU_MEMORY_UTILIZATION": "0.9", "GPU_MEMORY_UTILIZATION_MAX": "0.92"})
    assert p.gpu_memory_utilization == 0.9


def test_cpu_target_flags() -> None:
    p = parse({"SPARKSERVE_TARGET": "cpu", "MODEL": "/models/tiny", "MXFP4_LAYERS": "none",
               "MAX_MODEL_LEN": "512", "VLLM_EXTRA_ARGS": "--dtype bfloat16"})
    argv = flags.vllm_argv(p, python="py")
    for absent in ("--quantization-config", "--moe-backend", "--attention-backend", "--kv-cache-dtype",
                   "--gpu-memory-utilization", "--reasoning-parser"):
        assert absent not in argv, absent
    assert "--enforce-eager" in argv  # CUDA_GRAPHS defaults to off without a GPU
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[-2:] == ["--dtype", "bfloat16"]
    assert argv[argv.index("--max-model-len") + 1] == "512"


def test_cuda_graphs_off_means_eager() -> None:
    assert "--enforce-eager" in flags.vllm_argv(parse({"CUDA_GRAPHS": "off"}), python="py")


def test_lm_head_needs_the_patched_vllm(tmp_path: Path) -> None:
    """The site's patch manifest (written by `patches apply --site`) says whether the lm_head patch is in."""
    p = parse({})
    site_manifest = tmp_path / manifest.SITE_MANIFEST

    def applied(*ids: str) -> None:
        entries = [{"id": i, "sha256": "0" * 64, "files": [], "summary": "", "gate": ""} for i in ids]
        manifest.write(site_manifest, {"vllm": manifest.record("0.33.0", "site", [])
                                       | {"patches": entries}})

    applied("0001-triton-mxfp4-quantize-kernel-combine-masks-with-elementwise")
    with pytest.raises(ProfileError) as info:
        preflight.check_capabilities(p, tmp_path)
    assert info.value.variable == "MXFP4_LAYERS" and "lm_head" in str(info.value)
    applied("0001-triton-mxfp4-quantize-kernel-combine-masks-with-elementwise",
            "0007-quantize-lm-head-online-to-mxfp4-marlin-w4a16")
    preflight.check_capabilities(p, tmp_path)
    preflight.check_capabilities(parse({"MXFP4_LAYERS": "moe,qkv,o"}), None)


def test_api_key_file(tmp_path: Path) -> None:
    key = tmp_path / "key"
    with pytest.raises(ProfileError, match="API_KEY_FILE="):
        preflight.read_api_key(parse({"API_KEY_FILE": str(key)}))
    key.write_text("\n")
    with pytest.raises(ProfileError, match="empty"):
        preflight.read_api_key(parse({"API_KEY_FILE": str(key)}))
    key.write_text("s3cret\n")
    assert preflight.read_api_key(parse({"API_KEY_FILE": str(key)})) == "s3cret"
    assert preflight.read_api_key(parse({})) is None


@pytest.mark.parametrize(("arch", "cc", "runs"), [
    ("12.1a", (12, 1), True), ("12.1a", (12, 0), False), ("12.0f", (12, 1), True),
    ("12.0f", (12, 0), True), ("12.0f", (10, 0), False), ("12.1a", (9, 0), False), ("9.0", (9, 0), True),
])
def test_arch_compatibility(arch: str, cc: tuple[int, int], runs: bool) -> None:
    assert gpu.runs_on(arch, *cc) is runs


def test_gpu_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    p = parse({})

    def no_driver() -> list[gpu.Gpu]:
        raise gpu.NoGpu("no NVIDIA driver in the container")

    monkeypatch.setattr(gpu, "visible_gpus", no_driver)
    with pytest.raises(preflight.GpuRefusal, match="--gpus all"):
        preflight.check_gpu(p, "12.1a 12.0f", {})
    monkeypatch.setattr(gpu, "visible_gpus", lambda: [gpu.Gpu(0, "NVIDIA H100", 9, 0)])
    with pytest.raises(preflight.GpuRefusal, match=r"compute capability 9\.0.*FLASHINFER_CUDA_ARCH_LIST"):
        preflight.check_gpu(p, "12.1a 12.0f", {})
    monkeypatch.setattr(gpu, "visible_gpus", lambda: [gpu.Gpu(0, "NVIDIA GB10", 12, 1)])
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "12.1a 12.0f")
    assert preflight.check_gpu(p, "12.1a 12.0f", {}) == []
    monkeypatch.setattr(gpu, "visible_gpus", lambda: [gpu.Gpu(0, "RTX PRO 6000", 12, 0)])
    warnings = preflight.check_gpu(p, "12.1a 12.0f", {})
    assert len(warnings) == 1 and "SPARKSERVE_TARGET=spark" in warnings[0]


# --- strictness: empty values, unknown names, extra arguments, effective bounds ----------------------------

@pytest.mark.parametrize("name", VARIABLES)
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_value_is_an_error_not_the_default(name: str, value: str) -> None:
    """`MODEL=` or `MXFP4_LAYERS=` used to become the default silently."""
    with pytest.raises(ProfileError) as info:
        parse({name: value})
    assert info.value.variable == name
    assert "empty" in str(info.value)


@pytest.mark.parametrize(("name", "value"), [
    ("GPU_MEMORY_UTILIZATION", '"0.7"'), ("GPU_MEMORY_UTILIZATION", "'0.7'"), ("KV_CACHE_DTYPE", '"fp8"'),
    ("CUDA_GRAPHS", "'on'"), ("MAX_NUM_SEQS", '"8"'), ("SPARKSERVE_PUBLISH_ADDRESS", '"127.0.0.1"'),
])
def test_a_value_refused_for_its_quotes_says_so(name: str, value: str) -> None:
    """`docker run -e GPU_MEMORY_UTILIZATION='"0.7"'` passes the quotes on: the refusal said only `must be a
    number`."""
    with pytest.raises(ProfileError) as info:
        parse({name: value})
    assert info.value.variable == name
    assert f"; the value carries quotes ({value}): remove them" in str(info.value)
    parse({name: value[1:-1]})  # without them it is valid
    with pytest.raises(ProfileError) as info:
        parse({"GPU_MEMORY_UTILIZATION": "0.7x"})
    assert "quotes" not in str(info.value)


@pytest.mark.parametrize(("name", "suggestion"), [
    ("GPU_MEMORY_UTILISATION", "GPU_MEMORY_UTILIZATION"),
    ("MOE_BACKNED", "MOE_BACKEND"),
    ("model", "MODEL"),
    ("MAX_NUM_SEQ", "MAX_NUM_SEQS"),
    ("VLLM_EXTRA_ARG", "VLLM_EXTRA_ARGS"),          # looks like an engine variable, but a typo of ours
    ("HF_HUB_OFLINE", "HF_HUB_OFFLINE"),
    ("VLLM_FLASHINFER_SINK_DECOD", "VLLM_FLASHINFER_SINK_DECODE"),
])
def test_a_misspelled_variable_is_an_error_with_a_suggestion(name: str, suggestion: str) -> None:
    """Misspelled variables used to be ignored."""
    with pytest.raises(ProfileError) as info:
        parse({**read_env(ROOT / "profiles" / "spark.env"), name: "0.9"})
    assert info.value.variable == name
    assert f"unknown variable; did you mean {suggestion}?" in str(info.value)


def test_an_unknown_variable_far_from_ours_passes_with_one_warning() -> None:
    """The image used to exit 2 for any name it did not know (KUBERNETES_SERVICE_HOST, TMPDIR ...)."""
    assert parse({"SOMETHING_ELSE": "1"}).name == "custom"
    assert environment.check({"SOMETHING_ELSE": "1", "TMPDIR": "/tmp", "MODEL": "m"}) == [
        "passed through unchecked (not profile variables, engine variables or the image's): "
        "SOMETHING_ELSE, TMPDIR"]
    assert environment.check({"MODEL": "m", "VLLM_X": "1"}) == []


def test_an_unknown_sparkserve_variable_is_an_error() -> None:
    with pytest.raises(ProfileError) as info:
        parse({"SPARKSERVE_SOMETHING": "1"})
    assert info.value.variable == "SPARKSERVE_SOMETHING"
    assert "not a profile variable (docs/PROFILES.md lists them)" in str(info.value)


def test_compose_settings_in_an_env_file_are_errors() -> None:
    with pytest.raises(ProfileError, match="read by docker compose on the host") as info:
        parse({"SPARKSERVE_HOST_PORT": "9000"})
    assert info.value.variable == "SPARKSERVE_HOST_PORT"


def test_engine_variables_that_replace_a_validated_setting_are_errors() -> None:
    with pytest.raises(ProfileError, match="set ATTENTION_BACKEND instead"):
        parse({"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})


def test_engine_and_system_variables_pass() -> None:
    p = parse({"VLLM_CPU_KVCACHE_SPACE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_TOKEN": "x",
               "PATH": "/usr/bin", "HOSTNAME": "abc", "HOME": "/root", "no_proxy": "",
               "NVIDIA_VISIBLE_DEVICES": "all"})
    assert p.model == "openai/gpt-oss-120b"
    with pytest.raises(ProfileError, match="empty") as info:
        parse({"VLLM_CPU_KVCACHE_SPACE": ""})
    assert info.value.variable == "VLLM_CPU_KVCACHE_SPACE"


def test_the_cluster_roles_network_settings_pass() -> None:
    """What ansible/roles/cluster renders into the serve container of a two-node deployment."""
    rendered = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1", "GLOO_SOCKET_IFNAME":
                "enp1s0f1np1", "TP_SOCKET_IFNAME": "enp1s0f1np1", "UCX_NET_DEVICES": "enp1s0f1np1"}
    text = (ROOT / "ansible" / "plugins" / "filter" / "sparkserve.py").read_text()  # where they are made
    assert all(name in text for name in rendered), "the cluster role renders other names: update this list"
    assert parse(rendered).model == "openai/gpt-oss-120b"


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "tests/docker/cpu/Dockerfile"])
def test_the_images_own_variables_are_known(dockerfile: str) -> None:
    """The entrypoint checks every name it sees, so each ENV of the images must be accepted."""
    text = (ROOT / dockerfile).read_text().replace("\\\n", " ")
    env = dict(m.split("=", 1) for line in text.splitlines() if line.startswith("ENV ")
               for m in shlex.split(line[4:]) if "=" in m)
    assert {"PATH", "HF_HOME", "VIRTUAL_ENV"} & env.keys(), env
    check_names(env)  # with the values the image sets (an empty one included)


@pytest.mark.parametrize(("extra", "variable"), [
    ("--gpu-memory-utilization 0.95", "GPU_MEMORY_UTILIZATION"),
    ("--gpu_memory_utilization=0.95", "GPU_MEMORY_UTILIZATION"),
    ("--gpu-memory-util 0.95", "GPU_MEMORY_UTILIZATION"),
    ("--kv-cache-memory-bytes 60G", "GPU_MEMORY_UTILIZATION"),
    ("--no-enable-prefix-caching", "PREFIX_CACHING"),
    ("--quantization-config.moe.activation mxfp8", "MXFP4_LAYERS"),
    ("-q fp8", "MXFP4_LAYERS"),
    ("--max-model-len 4096", "MAX_MODEL_LEN"),
    ("--dtype bfloat16 --enforce-eager", "CUDA_GRAPHS"),
    ("--config /tmp/vllm.yaml", "the profile"),
])
def test_extra_args_cannot_override_a_validated_flag(extra: str, variable: str) -> None:
    """VLLM_EXTRA_ARGS='--gpu-memory-utilization 0.95' used to override the validated 0.8 cap."""
    with pytest.raises(ProfileError) as info:
        parse({"VLLM_EXTRA_ARGS": extra})
    assert info.value.variable == "VLLM_EXTRA_ARGS"
    assert "would override a validated setting" in str(info.value) and f"set {variable}" in str(info.value)


def test_extra_args_that_decide_nothing_of_the_profile_pass() -> None:
    p = parse({"VLLM_EXTRA_ARGS": "--dtype bfloat16 --max-logprobs 5 --config-format hf --swap-space 4"})
    assert p.extra_args == ("--dtype", "bfloat16", "--max-logprobs", "5", "--config-format", "hf",
                            "--swap-space", "4")


def test_the_command_line_is_checked_like_vllm_extra_args() -> None:
    check_extra_args(["--dtype", "half"], "command")
    with pytest.raises(ProfileError) as info:
        check_extra_args(["--port", "9000"], "command")
    assert info.value.variable == "command" and "SPARKSERVE_PORT" in str(info.value)


def test_every_flag_the_profile_emits_is_guarded() -> None:
    argv = flags.vllm_argv(parse(read_env(ROOT / "profiles" / "spark.env")), python="py")
    emitted = {a for a in argv if a.startswith("--")} - {"--no-enable-prefix-caching"}
    assert emitted <= set(guarded_flags()), emitted - set(guarded_flags())


@pytest.mark.parametrize(("env", "bound"), [
    ({"GPU_MEMORY_UTILIZATION": "1.7"}, "at most 0.8, the default cap GPU_MEMORY_UTILIZATION_MAX"),
    ({"GPU_MEMORY_UTILIZATION": "0.85"}, "at most 0.8, the default cap GPU_MEMORY_UTILIZATION_MAX"),
    ({"GPU_MEMORY_UTILIZATION": "0.93", "GPU_MEMORY_UTILIZATION_MAX": "0.92"},
     "at most 0.92, the profile's cap GPU_MEMORY_UTILIZATION_MAX"),
])
def test_limits_report_the_effective_bound(env: dict[str, str], bound: str) -> None:
    """GPU_MEMORY_UTILIZATION=1.7 used to say "at most 1" although the real limit was the 0.8 cap."""
    with pytest.raises(ProfileError) as info:
        parse(env)
    assert info.value.variable == "GPU_MEMORY_UTILIZATION"
    assert bound in str(info.value)


def test_the_server_is_offline_unless_the_profile_says_otherwise() -> None:
    assert parse({}).offline is True
    assert parse({"HF_HUB_OFFLINE": "0"}).offline is False
    with pytest.raises(ProfileError, match="on or off"):
        parse({"HF_HUB_OFFLINE": "sometimes"})


def test_dev_null_as_the_key_file_means_no_key() -> None:
    """compose always sets API_KEY_FILE to its secret, which is /dev/null when no key file is given."""
    assert preflight.read_api_key(parse({"API_KEY_FILE": "/dev/null"})) is None


def test_the_listen_address_reaches_the_command_and_the_healthcheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host networking (two nodes) has no port mapping: the server listens on the host's bind address."""
    from sparkserve.serving import flags, health

    p = parse({"SPARKSERVE_LISTEN": "127.0.0.1", "SPARKSERVE_PORT": "8001"})
    argv = flags.vllm_argv(p)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8001"
    assert flags.vllm_argv(parse({}))[flags.vllm_argv(parse({})).index("--host") + 1] == "0.0.0.0"
    with pytest.raises(ProfileError, match="IP address") as info:
        parse({"SPARKSERVE_LISTEN": "localhost"})
    assert info.value.variable == "SPARKSERVE_LISTEN"
    with pytest.raises(ProfileError, match="set SPARKSERVE_LISTEN"):
        parse({"VLLM_EXTRA_ARGS": "--host 127.0.0.1"})
    asked: list[str] = []

    def probe(url: str, timeout: float) -> bool:
        asked.append(url)
        return False

    monkeypatch.setattr(health, "probe", probe)
    for listen, url in (("0.0.0.0", "http://127.0.0.1:8001/health"), ("10.0.0.5", "http://10.0.0.5:8001/health")):
        monkeypatch.setenv("SPARKSERVE_LISTEN", listen)
        monkeypatch.setenv("SPARKSERVE_PORT", "8001")
        assert health.main() == 1 and asked[-1] == url


def test_marlin_gemv_is_marlin_with_the_decode_kernels_switched_on_for_vllm() -> None:
    """MOE_BACKEND=marlin-gemv: vLLM's Marlin MoE on the command line, and patch vllm/0007's switch in
    vLLM's environment (the launch plan's); refused without a GPU; the engine variable alone is not a way
    around the setting."""
    from sparkserve.serving import environment, vllmconfig

    p = parse({**read_env(ROOT / "profiles" / "hopper-h100.env"), "MOE_BACKEND": "marlin-gemv"})
    argv = flags.vllm_argv(p, python="py")
    assert argv[argv.index("--moe-backend") + 1] == "marlin"
    assert vllmconfig.engine_environment(p.moe_backend) == {"VLLM_MXFP4_MOE_GEMV": "1"}
    assert vllmconfig.engine_environment("marlin") == {}
    with pytest.raises(ProfileError, match="MXFP4_LAYERS has no `moe`"):
        parse({"SPARKSERVE_TARGET": "cpu", "MODEL": "/m", "MXFP4_LAYERS": "none",
               "MOE_BACKEND": "marlin-gemv"})
    from sparkserve.serving.kinds import Context
    from sparkserve.serving.settings import _check_moe_backend

    ctx = Context({}, lambda model: True)
    ctx.values.update(target="cpu", mxfp4_layers=frozenset({"moe"}))
    with pytest.raises(ProfileError, match="CUDA kernels"):  # what a cpu target would be told with `moe`
        _check_moe_backend("marlin-gemv", ctx)
    with pytest.raises(ProfileError, match="MOE_BACKEND"):
        environment.check({"VLLM_MXFP4_MOE_GEMV": "1"})
