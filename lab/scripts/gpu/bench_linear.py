"""GEMM time of gpt-oss-120b's QKV (5120x2880), O (2880x4096) and lm_head (201088x2880) at M = 1..16:
BF16 (F.linear) against online MXFP4 through each MXFP4 kernel vLLM can pick (Marlin, Humming), with the
weights rotated through enough copies to keep them out of L2 (sparkserve_lab.kernels.timing). The
same shapes are also timed on one replayed weight set ("L2-warm"), only to show how much that flatters.

    python lab/scripts/gpu/bench_linear.py [--out FILE] [--m 1,2,4,8,16] [--layers qkv,o,lm_head]

In a proof (lab/scripts/gpu/proofs.sh) the table goes to linear_kernels.json in the proof record, which is
a measurement. What the script asserts, exiting 1 otherwise: every MXFP4 kernel was built as the kernel
named (not another one vLLM fell back to), and at M=1 each one's output is within REL_TOL of the BF16
layer's (relative L2 error: MXFP4 rounding of random weights, not garbage) and within AGREE_TOL of the
other MXFP4 kernel's (both compute the same quantized weights), or within ACT_TOL where one of them
quantizes its inputs and the other does not (W4A8 against W4A16).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from sparkserve_lab.kernels import mxfp4_layers as ml
from sparkserve_lab.kernels import timing

REL_TOL = 0.25
AGREE_TOL = 0.02
# FP8 e4m3 inputs (Humming's W4A8 on sm_90) round each activation by up to 2^-4 of itself, about 0.036 RMS
# over a row; the output of random weights carries that relative error.
ACT_TOL = 0.04


def agreement_tolerance(a_quantizes_inputs: bool, b_quantizes_inputs: bool) -> float:
    return AGREE_TOL if a_quantizes_inputs == b_quantizes_inputs else ACT_TOL


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def check_outputs(weight: torch.Tensor, layers: dict[str, list[object]], k: int) -> dict[str, object]:
    """Relative errors at M=1 of each MXFP4 kernel against BF16 and against the other kernels."""
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    ref = F.linear(x, weight)
    outs = {name: lays[0].quant_method.apply(lays[0], x, None) for name, lays in layers.items()}  # type: ignore[attr-defined]
    names = sorted(outs)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    w4a8 = {n: ml.quantizes_inputs(layers[n][0]) for n in names}
    return {"vs_bf16": {n: rel_err(outs[n], ref) for n in names}, "quantizes_inputs": w4a8,
            "between": {f"{a}~{b}": rel_err(outs[a], outs[b]) for a, b in pairs},
            "between_tolerance": {f"{a}~{b}": agreement_tolerance(w4a8[a], w4a8[b]) for a, b in pairs}}


def bench_layer(kind: str, ms: list[int], replays: int) -> dict[str, object]:
    n, k = ml.SHAPES[kind]
    l2 = timing.l2_bytes()
    bf16_bytes = n * k * 2
    bf16_copies = timing.copies_needed(bf16_bytes, l2)
    weights = [(torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(bf16_copies)]
    out: dict[str, object] = {"layer": kind, "shape": [n, k], "bf16_bytes": bf16_bytes, "rows": []}
    layers: dict[str, list[object]] = {}
    errors: dict[str, str] = {}
    for kernel in ml.KERNELS:
        try:
            first, _, _ = ml.build(kind, weights[0], kernel)
            copies = timing.copies_needed(ml.weight_bytes(first), l2)
            layers[kernel] = [first] + [ml.build(kind, weights[i % len(weights)], kernel)[0]
                                        for i in range(1, copies)]
            out[f"{kernel}_bytes"] = ml.weight_bytes(first)
            got = ml.kernel_name(first)
            if got != kernel:
                errors[kernel] = f"vLLM built {got}"
        except Exception as exc:  # one kernel failing must not hide the others
            errors[kernel] = f"{type(exc).__name__}: {exc}"
    built = {name: lays for name, lays in layers.items() if name not in errors}
    if built:
        errs = check_outputs(weights[0], built, k)
        out["rel_err"] = errs
        for name, e in errs["vs_bf16"].items():  # type: ignore[attr-defined]
            if not e <= REL_TOL:
                errors[name] = f"relative error against BF16 {e:.3g} > {REL_TOL}"
        for pair, e in errs["between"].items():  # type: ignore[attr-defined]
            tol = errs["between_tolerance"][pair]  # type: ignore[index]
            if not e <= tol:
                errors[pair] = f"kernels disagree: relative difference {e:.3g} > {tol}"
    out["errors"] = errors
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        row: dict[str, object] = {"m": m}
        cold = [lambda w=w, x=x: F.linear(x, w) for w in weights]
        row["bf16"] = timing.graph_time(cold, bf16_bytes, l2, replays).to_dict()
        row["bf16_l2_warm"] = timing.graph_time([cold[0]], bf16_bytes, l2, replays).to_dict()
        for kernel, lays in layers.items():
            if kernel in errors:
                continue
            fns = [lambda lay=lay, x=x: lay.quant_method.apply(lay, x, None) for lay in lays]
            nbytes = ml.weight_bytes(lays[0])
            row[kernel] = timing.graph_time(fns, nbytes, l2, replays).to_dict()
            row[f"{kernel}_l2_warm"] = timing.graph_time(fns[:1], nbytes, l2, replays).to_dict()
        out["rows"].append(row)  # type: ignore[union-attr]
        cells = [f"{name} {v['median_us']:.1f}" for name, v in row.items() if isinstance(v, dict)]
        print(f"{kind} M={m}: " + ", ".join(cells) + " us", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    proof_dir = os.environ.get("SPARKSERVE_PROOF_DIR", ".")
    ap.add_argument("--out", default=os.path.join(proof_dir, "linear_kernels.json"))
    ap.add_argument("--m", default="1,2,4,8,16")
    ap.add_argument("--layers", default="qkv,o,lm_head")
    ap.add_argument("--replays", type=int, default=30)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark times GPU kernels", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "l2_bytes": timing.l2_bytes(),
           "method": timing.__doc__, "layers": []}
    for kind in a.layers.split(","):
        res["layers"].append(bench_layer(kind, [int(v) for v in a.m.split(",")], a.replays))  # type: ignore[union-attr]
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    failed = {lay["layer"]: lay["errors"] for lay in res["layers"] if lay["errors"]}  # type: ignore[union-attr,index]
    if failed:
        print(f"FAIL: kernels not built as named, or out of tolerance: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
