"""The engine switches of the patch series: environment variables only the patched vLLM reads (no vLLM
flag, no profile setting), what each accepts and which MoE backend it acts under.

vLLM parses them with int() when the layer that reads them loads, minutes into a start: a value that is
not a number is a traceback there, and a switch of the Marlin MoE under another backend does nothing,
silently. The preflight refuses both first (exit 2, naming the variable). The series' own kernels are
compiled and checked ahead of time for a few GPUs only (`COMPILED_FOR`); the GPU gate refuses a profile that
asks for them on another (exit 2, naming the variable). docs/PROFILES.md's table of them is `markdown()`:
python -m sparkserve.serving.switches
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkserve.serving.gpu import Gpu
from sparkserve.serving.kinds import Choice, Context, Kind, ProfileError, Whole

# The MoE backends whose experts vLLM's Marlin method serves (vllm/0007-0009 act inside it).
MARLIN = ("marlin", "marlin-gemv")
ON_OFF = Choice(("0", "1"))
# The compute capabilities the series' own Triton and Gluon kernels are compiled for ahead of time, without
# a GPU, and checked (no local memory or stack; tests/image's gate tests compile each for all of these):
# H100/H200 (sm_90a), desktop Blackwell (sm_120a), DGX Spark (sm_121a). Triton would compile them for any
# GPU at run time, unchecked; the GPU gate refuses that instead.
COMPILED_FOR = ((9, 0), (12, 0), (12, 1))
BUILT_FOR = ", ".join(f"{major}.{minor}" for major, minor in COMPILED_FOR)  # as messages name them
# The MOE_BACKEND values that run the series' own kernels, with the patch that has them.
KERNEL_BACKENDS = {"marlin-gemv": ("vllm/0007", "marlin")}  # value: (patch, the same experts without them)


@dataclass(frozen=True)
class EngineSwitch:
    var: str
    patch: str
    kind: Kind  # the profile variables' kinds (serving/kinds.py) read and describe the values
    default: str
    doc: str
    backends: tuple[str, ...] = ()  # MOE_BACKEND values under which it acts (empty: any)
    kernels: bool = False  # a value off its default runs the patch's own kernels (see COMPILED_FOR)

    def read(self, text: str, ctx: Context) -> object:
        try:
            return self.kind.read(self.var, text.strip(), ctx)
        except ProfileError as exc:
            raise ProfileError(self.var, text, f"{exc.why} (patch {self.patch}; docs/PROFILES.md, engine "
                                               "switches)") from None


SWITCHES: tuple[EngineSwitch, ...] = (
    EngineSwitch("VLLM_FLASH_ATTN_GROUP_AOT", "vllm/0005", ON_OFF, "0",
                 "FlashAttention 3's ahead-of-time schedule per KV-cache group"),
    EngineSwitch("VLLM_ROUTER_BIAS_GEMV", "vllm/0006", ON_OFF, "0",
                 "the biased router GEMM of up to 4 tokens in one Triton kernel", kernels=True),
    EngineSwitch("VLLM_MXFP4_MOE_GEMV_MAX_TOKENS", "vllm/0007", Whole(1, 8), "8",
                 "the largest decode batch the MoE GEMV kernels serve (larger ones stay on Marlin)",
                 backends=("marlin-gemv",)),
    EngineSwitch("VLLM_MXFP4_MOE_GEMM_MIN_TOKENS", "vllm/0008", Whole(0), "0",
                 "batches of at least this many tokens on the grouped Triton GEMMs over Marlin's weights "
                 "(0: off)", backends=MARLIN, kernels=True),
    EngineSwitch("VLLM_MXFP4_MOE_GEMV_MMA", "vllm/0009", ON_OFF, "0",
                 "the MoE GEMV kernels' K loop on tensor cores (mma.sync)", backends=("marlin-gemv",),
                 kernels=True),
    EngineSwitch("VLLM_ROUTER_GEMV_TOPK", "vllm/0010", ON_OFF, "0",
                 "gpt-oss's routing of up to 8 tokens (gate, bias, top-k, softmax) in one Triton kernel",
                 kernels=True),
)
BY_VAR: dict[str, EngineSwitch] = {s.var: s for s in SWITCHES}


def check(env: Mapping[str, str]) -> list[str]:
    """Raise a ProfileError for the first engine switch (in the table's order) whose value is not one it
    accepts; return a warning for each set off its default under a MOE_BACKEND it does not act under (an
    ablation of a profile may do that on purpose: it changes nothing)."""
    backend = env.get("MOE_BACKEND", "").strip()
    ctx = Context(env, lambda model: False)  # the switches' kinds read no other setting
    warnings = []
    for s in SWITCHES:
        text = env.get(s.var)
        if text is None or text.strip() == "":
            continue  # an empty value is refused with every engine variable's (serving/environment.py)
        value = s.read(text, ctx)
        if s.backends and value != s.read(s.default, ctx) and backend not in s.backends:
            warnings.append(f"{s.var}={text.strip()} does nothing: patch {s.patch} acts only with "
                            f"MOE_BACKEND={' or '.join(s.backends)} (here {backend or 'unset'})")
    return warnings


def kernel_requests(env: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(variable, value, patch, the value without the patch's kernels) of each setting of ENV that runs
    the series' own kernels: MOE_BACKEND=marlin-gemv, and each kernel switch off its default under a
    backend it acts under. ENV's values are valid (check() has read them)."""
    backend = env.get("MOE_BACKEND", "").strip()
    asks = []
    if backend in KERNEL_BACKENDS:
        patch, without = KERNEL_BACKENDS[backend]
        asks.append(("MOE_BACKEND", backend, patch, without))
    ctx = Context(env, lambda model: False)
    for s in SWITCHES:
        text = env.get(s.var, "").strip()
        if (s.kernels and text and (not s.backends or backend in s.backends)
                and s.read(text, ctx) != s.read(s.default, ctx)):
            asks.append((s.var, text, s.patch, s.default))
    return asks


def check_gpu(env: Mapping[str, str], gpu: Gpu) -> None:
    """Raise a ProfileError for the first setting of ENV that runs the series' own kernels on a GPU they
    are not compiled and checked for."""
    asks = kernel_requests(env)
    if (gpu.major, gpu.minor) in COMPILED_FOR or not asks:
        return
    var, value, patch, without = asks[0]
    raise ProfileError(var, value, f"runs patch {patch}'s kernels, which are compiled and checked for "
                                   f"compute capability {BUILT_FOR} only, and GPU {gpu.index} ({gpu.name}) "
                                   f"is {gpu.cc}: set {var}={without} in your local env file, or serve this "
                                   "GPU's profile")


def markdown() -> str:
    """The table of docs/PROFILES.md's engine switches."""
    rows = ["| variable | values | default | patch | what it decides | needs | its own kernels, for |",
            "|---|---|---|---|---|---|---|"]
    for s in SWITCHES:
        needs = f"`MOE_BACKEND={'` or `'.join(s.backends)}`" if s.backends else "-"
        kernels = f"compute capability {BUILT_FOR}" if s.kernels else "-"
        rows.append(f"| `{s.var}` | {s.kind.describe()} | `{s.default}` | {s.patch} | {s.doc} | {needs} | "
                    f"{kernels} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
