"""A GB10 decode-step estimate from a measured breakdown: bytes each kernel class must read, at the
GB10's bandwidth, plus the time the class took on the measured GPU beyond its own byte time.

    t(class, GB10) = bytes(class) / BW_GB10 + max(0, t(class, measured) - bytes(class) / BW_measured)

Assumptions, which the report prints with every number: weights are read once per step (no reuse across
steps: 65 GB do not fit any cache); MoE experts are hit uniformly, so a batch of B reads
E * (1 - (1 - k/E)^B) experts per layer; KV cache reads at the context length given (half the layers
window it); the part of a class's time that is not bytes (launch latency, small-M inefficiency,
synchronisation) is carried over unchanged, which is optimistic because a GB10 has far less compute than an
H100; gaps between kernels and host time are left out (the profiled gaps include the profiler's own host
overhead). It is an estimate, never a measurement.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve import config
from sparkserve_lab.trace.classify import (
    ATTENTION,
    CLASSES,
    LM_HEAD,
    MOE_GEMM1,
    MOE_GEMM2,
    QKV_O,
    ROUTER_TOPK,
)

DEFAULT_FILE = Path("lab/configs/gb10-estimate.toml")


@dataclass(frozen=True)
class Inputs:
    gb10_nominal_gbs: float
    gb10_measured_gbs: float
    measured_gpu_gbs: float  # the H100's nominal bandwidth
    h200_gbs: float
    sources: dict[str, str]
    model: dict[str, float]


# The file's schema (sparkserve.config): bandwidths with where each comes from, and the model's shape.
@dataclass(frozen=True)
class _Bandwidth:
    gb10_nominal_gbs: float
    gb10_measured_gbs: float
    h100_nominal_gbs: float
    h200_nominal_gbs: float
    gb10_nominal_source: str = ""
    gb10_measured_source: str = ""
    h100_nominal_source: str = ""
    h200_nominal_source: str = ""


@dataclass(frozen=True)
class _Model:
    layers: float
    hidden: float
    intermediate: float
    experts: float
    experts_per_token: float
    q_heads: float
    kv_heads: float
    head_dim: float
    vocab: float
    sliding_window: float
    mxfp4_bits_per_weight: float


@dataclass(frozen=True)
class _EstimateFile:
    bandwidth: _Bandwidth
    model: _Model


def load(path: Path) -> Inputs:
    data = config.load_toml(_EstimateFile, path)
    bw = dataclasses.asdict(data.bandwidth)
    return Inputs(data.bandwidth.gb10_nominal_gbs, data.bandwidth.gb10_measured_gbs,
                  data.bandwidth.h100_nominal_gbs, data.bandwidth.h200_nominal_gbs,
                  {k: v for k, v in bw.items() if k.endswith("_source") and v},
                  dataclasses.asdict(data.model))


def experts_hit(batch: int, experts: float, top_k: float) -> float:
    """Distinct experts a batch of `batch` tokens reads per layer, if every token picks top_k of experts
    uniformly at random."""
    return experts * (1.0 - (1.0 - top_k / experts) ** batch)


def class_bytes(m: dict[str, float], batch: int, context: int, mxfp4_layers: set[str],
                kv_bytes: float) -> dict[str, float]:
    """Bytes read per decode step by the classes that read weights or the KV cache."""
    mx = m["mxfp4_bits_per_weight"] / 8
    layers, h, inter = m["layers"], m["hidden"], m["intermediate"]
    hit = experts_hit(batch, m["experts"], m["experts_per_token"])
    qkv = h * (m["q_heads"] + 2 * m["kv_heads"]) * m["head_dim"]
    o = m["q_heads"] * m["head_dim"] * h
    dense = mx if {"qkv", "o"} <= mxfp4_layers else 2.0
    kv_per_token_layer = 2 * m["kv_heads"] * m["head_dim"] * kv_bytes
    windowed = min(context, m["sliding_window"])
    kv = batch * kv_per_token_layer * (layers / 2) * (context + windowed)
    out = dict.fromkeys(CLASSES, 0.0)
    out[MOE_GEMM1] = layers * hit * h * 2 * inter * mx
    out[MOE_GEMM2] = layers * hit * inter * h * mx
    out[QKV_O] = layers * (qkv + o) * dense
    out[ROUTER_TOPK] = layers * h * m["experts"] * 2.0
    out[LM_HEAD] = m["vocab"] * h * (mx if "lm_head" in mxfp4_layers else 2.0)
    out[ATTENTION] = kv
    return out


def estimate(inputs: Inputs, class_us: dict[str, float], batch: int, context: int, mxfp4_layers: set[str],
             kv_bytes: float, bandwidth_gbs: float, measured_gbs: float | None = None) -> dict[str, Any]:
    """Per class: bytes, the measured time, its byte time on the measured GPU (`measured_gbs`, the H100's
    by default), the GB10 estimate (us)."""
    b = class_bytes(inputs.model, batch, context, mxfp4_layers, kv_bytes)
    gpu_gbs = inputs.measured_gpu_gbs if measured_gbs is None else measured_gbs
    rows = {}
    for c in CLASSES:
        measured = float(class_us.get(c, 0.0))
        byte_measured = b[c] / (gpu_gbs * 1e3)  # bytes / (GB/s) in us
        rest = max(0.0, measured - byte_measured)
        gb10 = b[c] / (bandwidth_gbs * 1e3) + rest
        rows[c] = {"bytes": round(b[c]), "measured_us": round(measured, 1),
                   "byte_us_measured_gpu": round(byte_measured, 1), "gb10_us": round(gb10, 1)}
    step = sum(r["gb10_us"] for r in rows.values())
    return {"batch": batch, "context": context, "bandwidth_gbs": bandwidth_gbs, "classes": rows,
            "bytes_total": round(sum(b.values())), "step_us": round(step, 1),
            "tok_s_per_user": round(1e6 / step, 1) if step else None,
            "tok_s_aggregate": round(batch * 1e6 / step, 1) if step else None}
