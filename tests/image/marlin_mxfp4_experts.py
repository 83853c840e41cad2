"""gpt-oss's MXFP4 experts as Marlin holds them, for the gate tests of vllm/0007 and vllm/0008.

In a test: MarlinExperts of gpt-oss-120b's shapes on the meta device and a call of them (`meta_experts`,
`apply`). In Triton's interpreter (a process of its own, `gate_support.run_json`): random experts put
into Marlin's layout by vLLM's own preparation, with vLLM's CPU reference of the repack kernel
(marlin_weights, which vLLM's own tests compare with gptq_marlin_repack) standing in for the CUDA op
(`install_cpu_repack`, `random_experts`), and the references the kernels are judged against, from vLLM's
fp4 decoding (break_fp4_bytes) and its SwiGLU (forward_native).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

# gpt-oss-120b as Marlin holds it: hidden 2880 padded to 3072, intermediate 2880 padded to 2944, 128 experts,
# top-4.
HIDDEN, INTER, HIDDEN_PAD, INTER_PAD, EXPERTS, TOPK = 2880, 2880, 3072, 2944, 128, 4


def meta_experts(activation: Any = None, mxfp4: bool = True, hidden_pad: int = HIDDEN_PAD) -> tuple[Any, Any]:
    """gpt-oss-120b's MarlinExperts on the meta device (Marlin's shapes, no memory), and its layer."""
    from vllm.model_executor.layers.fused_moe import config as moe_config
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts import marlin_moe

    meta = torch.device("meta")
    w1_scale = torch.empty(EXPERTS, hidden_pad // 32, 2 * INTER_PAD, dtype=torch.uint8, device=meta)
    w2_scale = torch.empty(EXPERTS, INTER_PAD // 32, hidden_pad, dtype=torch.uint8, device=meta)
    bias1 = torch.empty(EXPERTS, 2 * INTER_PAD, dtype=torch.bfloat16, device=meta)
    bias2 = torch.empty(EXPERTS, hidden_pad, dtype=torch.bfloat16, device=meta)
    if mxfp4:
        quant = moe_config.mxfp4_w4a16_moe_quant_config(w1_scale, w2_scale, bias1, bias2)
    else:
        quant = moe_config.int4_w4a16_moe_quant_config(w1_scale, w2_scale, None, None)
    config = moe_config.FusedMoEConfig(
        num_experts=EXPERTS, experts_per_token=TOPK, hidden_dim=HIDDEN_PAD, intermediate_size=INTER_PAD,
        num_local_experts=EXPERTS, num_logical_experts=EXPERTS,
        moe_parallel_config=moe_config.FusedMoEParallelConfig.make_no_parallel(),
        activation=activation or MoEActivation.SWIGLUOAI, in_dtype=torch.bfloat16, device="cpu",
        routing_method=moe_config.RoutingMethodType.TopK, hidden_dim_unpadded=HIDDEN,
        intermediate_size_per_partition_unpadded=INTER, has_bias=True)
    layer = SimpleNamespace(
        w13_weight=torch.empty(EXPERTS, hidden_pad // 16, 4 * INTER_PAD, dtype=torch.int32, device=meta),
        w2_weight=torch.empty(EXPERTS, INTER_PAD // 16, 2 * hidden_pad, dtype=torch.int32, device=meta))
    return marlin_moe.MarlinExperts(config, quant), layer


def apply(experts: Any, layer: Any, m: int, expert_map: Any = None) -> None:
    """A call of m tokens (random activations and routing) through MarlinExperts.apply."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    x = torch.randn(m, HIDDEN_PAD).to(torch.bfloat16)
    out = torch.empty(m, HIDDEN_PAD, dtype=torch.bfloat16)
    ids = torch.randint(0, EXPERTS, (m, TOPK), dtype=torch.int32)
    experts.apply(out, x, layer.w13_weight, layer.w2_weight, torch.rand(m, TOPK), ids,
                  MoEActivation.SWIGLUOAI,
                  EXPERTS, expert_map, None, None, torch.empty(0), torch.empty(0), None, False)


def install_cpu_repack() -> None:
    """vLLM's CPU reference of gptq_marlin_repack in place of the CUDA op."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.marlin_utils_test import (
        get_weight_perm,
        marlin_weights,
    )

    def repack(b_q_weight: Any, size_k: int, size_n: int, num_bits: int, is_a_8bit: bool = False) -> Any:
        q = b_q_weight.T.contiguous().view(torch.uint8)
        nib = torch.stack((q & 15, q >> 4), dim=-1).reshape(size_n, size_k).T.contiguous()
        return marlin_weights(nib.to(torch.int32), size_k, size_n, num_bits, get_weight_perm(num_bits))

    ops.gptq_marlin_repack = repack


def random_experts(E: int, H: int, I: int, Hp: int, Ip: int, gen: Any) -> dict[str, Any]:  # noqa: E741
    """Random fp4 bytes, E8M0 scales 2^-8 .. 2^-4 (as trained experts' blocks) and biases of E experts of
    hidden H and intermediate I, zero-padded to Hp and Ip as vLLM's loader leaves them."""
    def q(rows: int, cols: int, pad_rows: int, pad_cols: int) -> Any:
        t = torch.zeros(E, pad_rows, pad_cols, dtype=torch.uint8)
        t[:, :rows, :cols] = torch.randint(0, 256, (E, rows, cols), generator=gen, dtype=torch.uint8)
        return t

    def s(rows: int, cols: int, pad_rows: int, pad_cols: int) -> Any:
        t = torch.zeros(E, pad_rows, pad_cols, dtype=torch.uint8)
        t[:, :rows, :cols] = torch.randint(119, 124, (E, rows, cols), generator=gen, dtype=torch.uint8)
        return t

    def b(n: int, pad: int, std: float) -> Any:
        t = torch.zeros(E, pad, dtype=torch.bfloat16)
        t[:, :n] = (torch.randn(E, n, generator=gen) * std).to(torch.bfloat16)
        return t

    return dict(w13=q(2 * I, H // 2, 2 * Ip, Hp // 2), s13=s(2 * I, H // 32, 2 * Ip, Hp // 32),
                b13=b(2 * I, 2 * Ip, 1.0),
                w2=q(H, I // 2, Hp, Ip // 2), s2=s(H, I // 32, Hp, Ip // 32), b2=b(H, Hp, 0.1))


def random_batch(M: int, E: int, H: int, Hp: int, gen: Any, share: bool = False) -> tuple[Any, Any, Any]:
    """M tokens of hidden H (bf16, zero-padded to Hp) and their routing: the top 4 of E experts by random
    logits, int32 ids, the weights renormalised as gpt-oss's router does; with `share`, the second token
    takes the first token's first expert as its fourth (two tokens on one expert)."""
    x = torch.zeros(M, Hp, dtype=torch.bfloat16)
    x[:, :H] = torch.randn(M, H, generator=gen).to(torch.bfloat16)
    tw, ids = torch.topk(torch.softmax(torch.randn(M, E, generator=gen), -1), 4, dim=-1)
    if share and M > 1 and int(ids[0, 0]) not in ids[1].tolist():
        ids[1, 3] = ids[0, 0]
    return x, ids.to(torch.int32).contiguous(), (tw / tw.sum(-1, keepdim=True)).contiguous()


def in_marlin_layout(p: dict[str, Any]) -> tuple[Any, ...]:
    """The experts as vLLM's preparation for Marlin leaves them: w13, w2, their scales, their biases."""
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp4 as mf4

    layer = SimpleNamespace(params_dtype=torch.bfloat16)
    return tuple(mf4.prepare_moe_mxfp4_layer_for_marlin(
        layer, p["w13"], p["w2"], p["s13"], p["s2"], p["b13"], p["b2"]))


def _dequant(w: Any, s: Any) -> Any:
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import break_fp4_bytes

    vals = torch.stack([break_fp4_bytes(w[e], torch.float32) for e in range(w.shape[0])])
    return vals * s.view(torch.float8_e8m0fnu).to(torch.float32).repeat_interleave(32, dim=-1)


def reference(x: Any, ids: Any, tw: Any, p: dict[str, Any], marlin: bool) -> Any:
    """gpt-oss's experts on the dequantized weights in float32; with `marlin`, Marlin's data flow: bf16
    after GEMM1 + bias, after the activation and after GEMM2 + bias times the routing weight, summed over
    the top-k in fp32 (moe_sum). A slot whose expert id is negative (a padded token's) adds nothing."""
    from vllm.model_executor.layers.activation import SwigluOAIAndMul

    def swiglu(h: Any) -> Any:
        return SwigluOAIAndMul.forward_native(SimpleNamespace(alpha=1.702, limit=7.0), h)

    W13, W2 = _dequant(p["w13"], p["s13"]), _dequant(p["w2"], p["s2"])
    rnd = (lambda t: t.to(torch.bfloat16).float()) if marlin else (lambda t: t)
    out = torch.zeros(x.shape, dtype=torch.float32)
    for m in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[m, j])
            if e < 0:
                continue
            a = rnd(swiglu(rnd(W13[e] @ x[m].float() + p["b13"][e].float())))
            out[m] += rnd((W2[e] @ a + p["b2"][e].float()) * tw[m, j])
    return out
