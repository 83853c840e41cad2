"""The MoE shapes of a served model, as FlashInfer's CUTLASS fused MoE sees them.

vLLM pads hidden and intermediate sizes to a multiple of 128 for both FlashInfer CUTLASS MXFP4 backends
(mxfp4_round_up_hidden_size_and_intermediate_size in vllm/model_executor/layers/fused_moe/oracle/mxfp4.py),
so gpt-oss's 2880 runs as 2944 (23 x 128). fc1 is the fused [up; gate] projection (2 x intermediate rows),
fc2 the down projection. The activation is gpt-oss's clamped SwiGLU:
    out = min(gate, limit) * sigmoid(alpha * min(gate, limit)) * (clamp(up, -limit, limit) + beta).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError

# FlashInfer CUTLASS MXFP4 backends: round hidden and intermediate up to this (vLLM, see above).
FLASHINFER_CUTLASS_ALIGN = 128


@dataclass(frozen=True)
class MoeShape:
    model: str
    hidden: int
    intermediate: int
    experts: int
    top_k: int
    swiglu_alpha: float = 1.702
    swiglu_beta: float = 1.0
    swiglu_limit: float = 7.0

    @property
    def padded_hidden(self) -> int:
        return _round_up(self.hidden, FLASHINFER_CUTLASS_ALIGN)

    @property
    def padded_intermediate(self) -> int:
        return _round_up(self.intermediate, FLASHINFER_CUTLASS_ALIGN)

    def key(self) -> dict[str, object]:
        """The fields a tactic table must agree on (the model id is informative only: two checkpoints
        with the same shapes run the same GEMMs)."""
        d = asdict(self)
        d.pop("model")
        return d

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "padded_hidden": self.padded_hidden,
                "padded_intermediate": self.padded_intermediate}

    def describe(self) -> str:
        return (f"{self.model}: hidden {self.hidden}, intermediate {self.intermediate} (padded "
                f"{self.padded_hidden}/{self.padded_intermediate}), {self.experts} experts, top-{self.top_k}")


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


GPT_OSS_120B = MoeShape("openai/gpt-oss-120b", hidden=2880, intermediate=2880, experts=128, top_k=4)
GPT_OSS_20B = MoeShape("openai/gpt-oss-20b", hidden=2880, intermediate=2880, experts=32, top_k=4)
KNOWN = {s.model: s for s in (GPT_OSS_120B, GPT_OSS_20B)}


def from_config(config: dict[str, object], model: str) -> MoeShape:
    """A gpt-oss style config.json (hidden_size, intermediate_size, num_local_experts,
    num_experts_per_tok, swiglu_limit)."""
    try:
        return MoeShape(
            model=model,
            hidden=int(config["hidden_size"]),  # type: ignore[call-overload]
            intermediate=int(config["intermediate_size"]),  # type: ignore[call-overload]
            experts=int(config["num_local_experts"]),  # type: ignore[call-overload]
            top_k=int(config["num_experts_per_tok"]),  # type: ignore[call-overload]
            swiglu_limit=float(config.get("swiglu_limit", 7.0)),  # type: ignore[arg-type]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SparkserveError(f"{model}: config.json has no gpt-oss MoE shape ({exc})") from None


def for_model(model: str) -> MoeShape:
    """The MoE shape of MODEL: a known id, or a local checkpoint folder with a config.json."""
    if model in KNOWN:
        return KNOWN[model]
    cfg = Path(model) / "config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text())
        except (OSError, ValueError) as exc:
            raise SparkserveError(f"cannot read {cfg}: {exc}") from None
        return from_config(data, model)
    raise SparkserveError(f"no known MoE shape for MODEL={model!r} (known: {', '.join(KNOWN)}, or a folder "
                          "holding a gpt-oss config.json)")
