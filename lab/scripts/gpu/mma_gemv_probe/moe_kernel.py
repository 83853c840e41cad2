"""Probe, not part of the product: the routed MoE form of mma_gemv.py's tensor-core GEMV (the K loop is
vllm/0009's, mxfp4_moe_mma._k_loop; the patched vLLM must be importable). A decode step of
M <= 8 tokens with top-k routing (gpt-oss: top 4 of 128 experts) reads each distinct expert's matrix once
and multiplies it by the rows of every token routed to it: those rows are the MMA's N (8 columns), so a
shared expert costs one pass over its weights whatever number of tokens chose it.

    route(topk_ids, E)     host side (torch, no host sync, CUDA-graph safe): the routing table
    mma_moe_gemv_kernel    the kernel: out[slot, n] = sum_k x[token(slot), k] W[expert(slot)][n, k]

A routed slot is s = token * TOPK + j (the j-th expert of a token); out has one row a slot. The table holds
one row of TABLE_WIDTH int32 for each of M * TOPK possible distinct experts, sorted by expert id:
    [expert id, count, -1 x 6, slot 0 .. slot 7]     (the slots routed to that expert, in slot order)
rows past the distinct count hold expert -1 and count 0, slot columns past the count -1. Slots whose expert
is -1 or >= E (padding, experts held elsewhere) are in no row: their out rows are not written.

The scripts beside this file exercise it (run from the repository root, in the serving image):

    python3 lab/scripts/gpu/mma_gemv_probe/compile_probe.py --kernel moe   SASS per weight word, no GPU
    python3 lab/scripts/gpu/mma_gemv_probe/cpu_selftest.py                 route() among its CPU checks
    python3 lab/scripts/gpu/mma_gemv_probe/check_moe.py                    numerics and L2-cold speed, GPU

Grid: (N / 64 tile columns, M * TOPK distinct-expert rows, SPLIT_K). The expert axis has a fixed length, so
one captured launch serves every routing of M tokens; a program whose row holds expert -1 returns at once.
"""

import os
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from vllm.model_executor.layers.fused_moe.experts.mxfp4_moe_mma import (
    _B_L,
    NUM_WARPS,
    _group_range,
    _idx,
    _k_loop,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mma_gemv import outputs

__all__ = ["NUM_WARPS", "SLOT0", "TABLE_WIDTH", "mma_moe_gemv_kernel", "route"]

TABLE_WIDTH = 16  # int32 a row: 64 bytes, so the slot list (columns 8..15) is one aligned 32-byte load
SLOT0 = 8  # the first slot column
MAX_SLOTS = 8  # the MMA's N: a token picks an expert at most once, so an expert has at most M <= 8 slots
# the same two inside the kernel (a jit function reads only constexpr globals)
_TW = gl.constexpr(TABLE_WIDTH)
_S0 = gl.constexpr(SLOT0)


def route(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """The routing table (int32 [M * TOPK, TABLE_WIDTH], on topk_ids' device) of topk_ids [M, TOPK]
    (M <= 8; a token's valid experts distinct, as top-k gives them). Only tensor ops of fixed shape: no
    host sync, so it can run inside a CUDA graph."""
    m, topk = topk_ids.shape
    assert m <= MAX_SLOTS, m
    n_slots = m * topk
    dev = topk_ids.device
    ids = topk_ids.reshape(n_slots).to(torch.int64)
    valid = (ids >= 0) & (ids < num_experts)
    # padded slots sort last under the key num_experts; stable, so an expert's slots stay in slot order
    key, slot = torch.sort(torch.where(valid, ids, num_experts), stable=True)
    i = torch.arange(n_slots, device=dev)
    new = torch.ones(n_slots, dtype=torch.bool, device=dev)
    new[1:] = key[1:] != key[:-1]
    group = torch.cumsum(new.to(torch.int64), 0) - 1
    pos = i - torch.cummax(torch.where(new, i, 0), 0).values  # the slot's place in its expert's list
    ok = key < num_experts
    # padded slots all go to a spare row n_slots, cut off at the end (no data-dependent shapes)
    row = torch.where(ok, group, n_slots)
    col = torch.where(ok, SLOT0 + pos, SLOT0)
    table = torch.full((n_slots + 1, TABLE_WIDTH), -1, dtype=torch.int32, device=dev)
    table[:, 1] = 0
    table[row, 0] = key.to(torch.int32)  # repeated rows write the same id
    table.index_put_((row, torch.ones_like(row)), ok.to(torch.int32), accumulate=True)
    table[row, col] = slot.to(torch.int32)
    return table[:n_slots].contiguous()


@gluon.jit
def mma_moe_gemv_kernel(x_ptr, w_ptr, s_ptr, tab_ptr, out_ptr, k_tiles, row_words, s_row, w_estride,
                        s_estride, stride_xm, stride_om, TOPK: gl.constexpr, SPLIT_K: gl.constexpr = 1):
    """out[slot, 64 pid_n + n] (fp32) = sum_k x[slot // TOPK, k] W_e[n, k] for the slots of table row
    program_id(1) (expert e), tile column pid_n = program_id(0). w_ptr, s_ptr: expert 0's first word and
    first scale word; expert e's are w_estride and s_estride int32 further (k_tiles even, <= the rows
    stored). With SPLIT_K > 1, program_id(2) takes a contiguous range of scale groups and adds its partial
    sums into out (which must be zero on the routed rows) with atomics."""
    pid_n = gl.program_id(0)
    row = tab_ptr + gl.program_id(1) * _TW
    e = gl.load(row)
    if e < 0:  # past the distinct experts: the grid's expert axis is fixed for graph capture
        return
    cnt = gl.load(row + 1)
    # 64-bit: E experts of a matrix span more than 2^31 bytes
    w_ptr += e.to(gl.int64) * w_estride
    s_ptr += e.to(gl.int64) * s_estride
    g_begin, g_end = _group_range(gl.program_id(2), k_tiles, SPLIT_K)

    # x^T, the B operand [4 (b), 32 (k), 8 (MMA column c)]: column c gathers the x row of the token of the
    # row's slot c; columns past the count read the first slot's token (a valid row; not stored), so the
    # loop's loads need no mask and no more than the count's distinct rows are touched.
    xb = _idx(4, 0, _B_L, 3)
    xk = _idx(32, 1, _B_L, 3)
    xc = _idx(8, 2, _B_L, 3)
    x_slot = gl.load(row + _S0 + xc)
    x_slot = gl.where(xc < cnt, x_slot, gl.load(row + _S0))
    x_ptrs = x_ptr + (x_slot // TOPK) * stride_xm + ((g_begin + xb) * 32 + xk)
    acc = _k_loop(x_ptrs, xb, w_ptr + pid_n * 128, s_ptr + pid_n * 16, g_begin, g_end, row_words, s_row)

    tot, on, oc = outputs(acc)  # [64 (n), 8 (MMA column)]
    o_slot = gl.load(row + _S0 + oc)  # 64-byte table row: already in L1 from the loads above
    o_ptrs = out_ptr + o_slot * stride_om + pid_n * 64 + on
    o_ok = (oc < cnt) & (on >= 0)
    if SPLIT_K > 1:
        gl.atomic_add(o_ptrs, tot, mask=o_ok, sem="relaxed")
    else:
        gl.store(o_ptrs, tot, mask=o_ok)
