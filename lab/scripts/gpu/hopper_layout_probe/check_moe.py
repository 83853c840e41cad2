"""Probe, not part of the product: hopper_moe.py's two launches (gpt-oss's MoE for 1-8 decode tokens over
triton_kernels' Hopper MXFP4 layouts) on a CUDA GPU: their numbers, then one layer's L2-cold time against
its bytes' time.

Numerics: 8 experts of gpt-oss-120b's shapes (gate_up 5760 x 2880 with interleaved gate and up rows, down
2880 x 2880) from random E2M1 codes and E8M0 scales packed by hopper_pack.py, float32 biases, top-4
routing with random weights summing to 1, at M = 1, 2, 3, 4, 8 tokens, RB = 1, 2, 4 and down's experts in
one program a token or one a pair (SPLIT_E), against a float32
reference of the same weights: the activations gate_up stores (bf16) within 2^-7 of their largest (fp32 sums
of exact products in another order, then one bf16 rounding that a last-bit difference can tip), the layer's
output within 2^-8 of its largest (its K sums over activations that may differ by that rounding).
Speed: gpt-oss-120b's 128 experts a matrix (random words: the values do not change the time), each call
of one layer at M tokens routed to experts no earlier call of the graph read (so the experts have left L2
before they are read again, sparkserve_lab.kernels.timing), the median per layer at M = 1, 2, 4, 8 for
each RB and down's split, against the bytes of the M x 4 experts it reads at the device's measured copy
bandwidth.

On the GPU host, from the repository root, with torch and Triton 3.8 importable (PYTHONPATH=lab/src for
sparkserve_lab):

    python3 lab/scripts/gpu/hopper_layout_probe/check_moe.py [--quick]

Prints one JSON line, writes it as the proof record's hopper_layout_moe.json under `proof run`, then
asserts the numerics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
from sparkserve_lab import proofs
from sparkserve_lab.kernels import timing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hopper_moe
import hopper_pack
from check_gemv import dequant, random_codes

TOPK = 4
HIDDEN, INTER = 2880, 2880
ALPHA, LIMIT = 1.702, 7.0  # gpt-oss's SwiGLU
RBS = (1, 2, 4)
SPLITS_E = (False, True)  # down: a program a token (the combine in registers), or a pair (atomics)


class Experts:
    """E experts of one matrix (rows N, K) in the Hopper layouts, stacked, with float32 biases [E, N]."""

    def __init__(self, w: torch.Tensor, s: torch.Tensor, n: int, k: int, bias: torch.Tensor) -> None:
        self.w, self.s, self.n, self.k, self.bias = w, s, n, k, bias
        self.nbytes_expert = (w[0].numel() + s[0].numel()) * 4

    @classmethod
    def packed(cls, codes: list[torch.Tensor], scales: list[torch.Tensor], bias: torch.Tensor) -> Experts:
        w = torch.stack([torch.from_numpy(hopper_pack.pack_values(c.numpy()).view("int32")) for c in codes])
        s = torch.stack([torch.from_numpy(hopper_pack.pack_scales(x.numpy()).view("int32")) for x in scales])
        n, k = codes[0].shape
        return cls(w.cuda(), s.cuda(), n, k, bias.cuda())

    @classmethod
    def random_words(cls, e: int, n: int, k: int, gen: torch.Generator) -> Experts:
        """Timing only: random value words and scale bytes in 2^-12 .. 2^0, in the shapes pack_values and
        pack_scales give."""
        n_pad, g_pad = -(-n // 256) * 256, -(-(k // 32) // 4) * 4
        w = torch.randint(-2**31, 2**31 - 1, (e, n // 4, k // 2), generator=gen, dtype=torch.int32)
        s = torch.randint(115, 128, (e, n_pad // 32, 8 * g_pad * 4), generator=gen, dtype=torch.uint8)
        bias = torch.zeros(e, n)
        return cls(w.cuda(), s.view(torch.int32).cuda(), n, k, bias.cuda())


def launch(x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor, gu: Experts, dn: Experts,
           act: torch.Tensor, out: torch.Tensor, rb: int, split_e: bool = False) -> None:
    """One layer: gate_up and the SwiGLU into act (bf16 [M TOPK, INTER]), then down and the combine into
    out (split_e: a program a pair, adding into out, zeroed first)."""
    m = x.shape[0]
    if split_e:
        out.zero_()
    hopper_moe.moe_gate_up_kernel[(gu.n // (16 * rb), m * TOPK)](
        x, gu.w, gu.s, gu.bias, ids, act, gu.k // 64, gu.w.shape[2], gu.s.shape[2], gu.w[0].numel(),
        gu.s[0].numel(), gu.n, x.stride(0), act.stride(0), ALPHA, LIMIT, TOPK=TOPK, RB=rb,
        num_warps=hopper_moe.NUM_WARPS)
    hopper_moe.moe_down_kernel[(dn.n // (16 * rb), m * TOPK if split_e else m)](
        act, dn.w, dn.s, dn.bias, ids, wts, out, dn.k // 64, dn.w.shape[2], dn.s.shape[2], dn.w[0].numel(),
        dn.s[0].numel(), dn.n, act.stride(0), out.stride(0), TOPK=TOPK, RB=rb, SPLIT_E=split_e,
        num_warps=hopper_moe.NUM_WARPS)


def reference(x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor, w13: list[torch.Tensor],
              b13: torch.Tensor, w2: list[torch.Tensor],
              b2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The activations [M TOPK, INTER] (float32 of bf16, as the kernel stores them) and the layer's output
    [M, HIDDEN] in float32 from them."""
    h = torch.stack([x[p // TOPK].float() @ w13[int(e)].T + b13[int(e)]
                     for p, e in enumerate(ids.flatten().tolist())])
    gate = h[:, 0::2].clamp(max=LIMIT)
    up = h[:, 1::2].clamp(-LIMIT, LIMIT)
    act = ((up + 1.0) * gate * torch.sigmoid(ALPHA * gate)).to(torch.bfloat16).float()
    ys = torch.stack([act[p] @ w2[int(e)].T + b2[int(e)] for p, e in enumerate(ids.flatten().tolist())])
    out = (ys.view(x.shape[0], TOPK, -1) * wts.unsqueeze(-1).float()).sum(1)
    return act, out


def numerics(gen: torch.Generator, quick: bool) -> tuple[list[dict], bool]:
    e = 8
    gu_codes = [random_codes(2 * INTER, HIDDEN, gen) for _ in range(e)]
    dn_codes = [random_codes(HIDDEN, INTER, gen) for _ in range(e)]
    b13, b2 = torch.randn(e, 2 * INTER, generator=gen), torch.randn(e, HIDDEN, generator=gen)
    gu = Experts.packed([c for c, _ in gu_codes], [s for _, s in gu_codes], b13)
    dn = Experts.packed([c for c, _ in dn_codes], [s for _, s in dn_codes], b2)
    w13 = [dequant(c, s).cuda() for c, s in gu_codes]
    w2 = [dequant(c, s).cuda() for c, s in dn_codes]
    cases, ok = [], True
    for m in (1, 3, 8) if quick else (1, 2, 3, 4, 8):
        # gate_up's outputs of a few units: the SwiGLU's clamps and its curve both matter
        x = (torch.randn(m, HIDDEN, generator=gen) * 0.05).to(torch.bfloat16).cuda()
        ids = torch.stack([torch.randperm(e, generator=gen)[:TOPK] for _ in range(m)]).to(torch.int32).cuda()
        wts = torch.softmax(torch.randn(m, TOPK, generator=gen), -1).cuda()
        act_ref, out_ref = reference(x, ids, wts, w13, b13.cuda(), w2, b2.cuda())
        for rb, split_e in [(4, False), (2, True)] if quick else [(r, e) for r in RBS for e in SPLITS_E]:
            act = torch.full((m * TOPK, INTER), float("nan"), dtype=torch.bfloat16, device="cuda")
            out = torch.full((m, HIDDEN), float("nan"), device="cuda")
            launch(x, ids, wts, gu, dn, act, out, rb, split_e)
            torch.cuda.synchronize()
            act_err = (act.float() - act_ref).abs().max().item()
            err = (out - out_ref).abs().max().item()
            act_top, top = act_ref.abs().max().item(), out_ref.abs().max().item()
            good = act_err <= 2.0 ** -7 * act_top and err <= 2.0 ** -8 * top
            ok &= good
            cases.append({"M": m, "RB": rb, "split_e": split_e, "act_err": float(f"{act_err:.4g}"),
                          "act_max": float(f"{act_top:.4g}"), "err": float(f"{err:.4g}"),
                          "ref_max": float(f"{top:.4g}"), "ok": good})
    return cases, ok


def speed(gen: torch.Generator, quick: bool) -> dict:
    bandwidth, l2 = timing.copy_bandwidth(), timing.l2_bytes()
    experts = 128
    gu = Experts.random_words(experts, 2 * INTER, HIDDEN, gen)
    dn = Experts.random_words(experts, HIDDEN, INTER, gen)
    per_expert = gu.nbytes_expert + dn.nbytes_expert
    result: dict = {"copy_bandwidth_gbs": round(bandwidth / 1e9), "l2_bytes": l2, "experts": experts,
                    "expert_MB": round(per_expert / 1e6, 2), "rows": []}
    for m in (1, 8) if quick else (1, 2, 4, 8):
        read = m * TOPK * per_expert  # each token's pairs read their experts once
        calls_n = max(2, experts // (m * TOPK))  # calls of the graph, each on experts none before it read
        order = torch.randperm(experts, generator=gen)
        x = torch.randn(m, HIDDEN, generator=gen).to(torch.bfloat16).cuda()
        wts = torch.full((m, TOPK), 1.0 / TOPK, device="cuda")
        act = torch.zeros(m * TOPK, INTER, dtype=torch.bfloat16, device="cuda")
        out = torch.zeros(m, HIDDEN, device="cuda")
        idss = [order.roll(-i * m * TOPK)[:m * TOPK].view(m, TOPK).to(torch.int32).cuda()
                for i in range(calls_n)]
        row = {"M": m, "MB": round(read / 1e6, 2), "bytes_us": round(read / bandwidth * 1e6, 2), "us": {}}
        for rb in (2, 4) if quick else RBS:
            for split_e in SPLITS_E:
                calls = [lambda ids=ids, rb=rb, se=split_e, x=x, wts=wts, act=act, out=out:
                         launch(x, ids, wts, gu, dn, act, out, rb, se) for ids in idss]
                t = timing.graph_time(calls, read, l2)
                row["us"][f"rb{rb}" + ("_split_e" if split_e else "")] = round(t.median_us, 2)
                result["l2_note"] = t.l2_note
        row["fastest"] = min(row["us"], key=row["us"].__getitem__)
        row["fraction_of_bandwidth"] = round(row["bytes_us"] / row["us"][row["fastest"]], 3)
        result["rows"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress: a row as soon as it is timed
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="numerics at M = 1, 3, 8 (RB 4, RB 2 split); timing at M = 1 and 8, RB 2 and 4")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    gen = torch.Generator().manual_seed(0)
    cases, ok = numerics(gen, args.quick)
    print(f"numerics: {sum(c['ok'] for c in cases)} of {len(cases)} cases within tolerance", file=sys.stderr,
          flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "quick": args.quick, "numerics": cases, "numerics_ok": ok}
    if ok:
        result["speed"] = speed(gen, args.quick)
    print(json.dumps(result), flush=True)
    proofs.write_artifact(None, "hopper_layout_moe.json", result)
    assert ok, [c for c in cases if not c["ok"]]


if __name__ == "__main__":
    sys.exit(main())
