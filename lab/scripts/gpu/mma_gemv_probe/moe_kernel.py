"""Probe, not part of the product: the routed MoE form of mma_gemv.py's tensor-core GEMV (read that module's
docstring first: the MMA, the fragment layout, the decode and the K loop are its own). A decode step of
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mma_gemv import NUM_WARPS, UNIT, _idx, _step

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
                        s_estride, stride_xm, stride_om, TOPK: gl.constexpr, UNROLL: gl.constexpr = 2,
                        SPLIT_K: gl.constexpr = 1):
    """out[slot, 64 pid_n + n] (fp32) = sum_k x[slot // TOPK, k] W_e[n, k] for the slots of table row
    program_id(1) (expert e), tile column pid_n = program_id(0). w_ptr, s_ptr: expert 0's first word and
    first scale word; expert e's are w_estride and s_estride int32 further (k_tiles even, <= the rows
    stored). With SPLIT_K > 1, program_id(2) takes a contiguous range of scale groups and adds its partial
    sums into out (which must be zero on the routed rows) with atomics."""
    # the layouts of mma_gemv_kernel (its docstring and comments say why)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1, 1],
                                                  instr_shape=[1, 16, 8])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    W_L: gl.constexpr = gl.BlockedLayout([1, 2, 1, 1, 4], [1, 1, 8, 4, 1], [4, 1, 1, 1, 1], [4, 1, 3, 2, 0])
    H_L: gl.constexpr = gl.BlockedLayout([1, 2, 1, 1, 2], [1, 1, 8, 4, 1], [4, 1, 1, 1, 1], [4, 1, 3, 2, 0])
    S_L: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(3, H_L))
    O_L: gl.constexpr = gl.SliceLayout(0, MMA)

    pid_n = gl.program_id(0)
    row = tab_ptr + gl.program_id(1) * _TW
    e = gl.load(row)
    if e < 0:  # past the distinct experts: the grid's expert axis is fixed for graph capture
        return
    cnt = gl.load(row + 1)
    # 64-bit: E experts of a matrix span more than 2^31 bytes
    w_ptr += e.to(gl.int64) * w_estride
    s_ptr += e.to(gl.int64) * s_estride

    n_groups = k_tiles // 2
    if SPLIT_K > 1:
        per_split = gl.cdiv(gl.cdiv(n_groups, SPLIT_K), 4) * 4
        g_begin = gl.program_id(2) * per_split
        g_end = gl.minimum(g_begin + per_split, n_groups)
    else:
        g_begin = 0
        g_end = n_groups

    wb = _idx(4, 0, W_L, 5)
    wkt = _idx(2, 1, W_L, 5)
    wtc = _idx(8, 2, W_L, 5)
    wr = _idx(4, 3, W_L, 5)
    wwp = _idx(4, 4, W_L, 5)
    w_ptrs = w_ptr + pid_n * 128 + (2 * (g_begin + wb) + wkt) * row_words + (wtc * 16 + wr * 4 + wwp)

    sb = _idx(4, 0, S_L, 3)
    stc = _idx(8, 1, S_L, 3)
    swh = _idx(2, 2, S_L, 3)
    s_ptrs = s_ptr + pid_n * 16 + (g_begin + sb) * s_row + (2 * stc + swh)

    # x^T, the B operand [4 (b), 32 (k), 8 (MMA column c)]: column c gathers the x row of the token of the
    # row's slot c; columns past the count read the first slot's token (a valid row; not stored), so the
    # loop's loads need no mask and no more than the count's distinct rows are touched.
    xb = _idx(4, 0, B_L, 3)
    xk = _idx(32, 1, B_L, 3)
    xc = _idx(8, 2, B_L, 3)
    x_slot = gl.load(row + _S0 + xc)
    x_slot = gl.where(xc < cnt, x_slot, gl.load(row + _S0))
    x_ptrs = x_ptr + (x_slot // TOPK) * stride_xm + ((g_begin + xb) * 32 + xk)

    # the K loop of mma_gemv_kernel, unchanged
    acc = gl.zeros([4, 64, 8], gl.float32, MMA)
    n_full = (g_end - g_begin) // (4 * UNROLL)
    for _it in range(n_full):
        for _u in gl.static_range(UNROLL):
            acc = _step(acc, w_ptrs, s_ptrs, x_ptrs, None, None, None, H_L, A_L, False)
            w_ptrs += 8 * row_words
            s_ptrs += 4 * s_row
            x_ptrs += 128
    g0 = g_begin + n_full * 4 * UNROLL
    for u in gl.static_range(UNROLL):  # the last groups: masked
        if g0 + 4 * u < g_end:
            acc = _step(acc, w_ptrs, s_ptrs, x_ptrs, (g0 + 4 * u + wb) < g_end, (g0 + 4 * u + sb) < g_end,
                        (g0 + 4 * u + xb) < g_end, H_L, A_L, True)
            w_ptrs += 8 * row_words
            s_ptrs += 4 * s_row
            x_ptrs += 128

    tot = gl.sum(acc, axis=0) * UNIT  # [64 (n), 8 (MMA column)]
    on = _idx(64, 0, O_L, 2)
    oc = _idx(8, 1, O_L, 2)
    o_slot = gl.load(row + _S0 + oc)  # 64-byte table row: already in L1 from the loads above
    o_ptrs = out_ptr + o_slot * stride_om + pid_n * 64 + on
    o_ok = (oc < cnt) & (on >= 0)
    if SPLIT_K > 1:
        gl.atomic_add(o_ptrs, tot, mask=o_ok, sem="relaxed")
    else:
        gl.store(o_ptrs, tot, mask=o_ok)
