"""Probe, not part of the product: gpt-oss's MoE for 1-8 decode tokens in two launches over triton_kernels'
Hopper MXFP4 layouts (the copy of the experts vLLM's triton backend keeps on sm_90), built on
hopper_gemv.py's K loop (mma.sync on words read straight from the layout; check_layout.py says where
everything sits):

- moe_gate_up_kernel, grid (N / 16 RB, M TOPK): program (n block, pair p = TOPK m + j) computes
  h[n] = x[m] . W13[e] [n, :] + b13[e, n] for the expert e = ids[m, j] in float32 and stores the activation
  of its 8 RB intermediate columns, act[p, i] (bf16): gate_up's rows are gpt-oss's interleaved pairs (row 2 i
  the gate, 2 i + 1 the up of column i), as the checkpoint and triton_kernels' fused SwiGLU have them, and
  the SwiGLU is gpt-oss's clamped one (g = min(gate, limit), u = clamp(up, -limit, limit),
  (u + 1) g sigmoid(alpha g)). The pairs sit in two lanes of the MMA's accumulator; the epilogue's layout
  change puts them in one.
- moe_down_kernel, grid (N / 16 RB, M): program (n block, token m) runs its TOPK experts one after the other,
  each over the activation of its pair, and adds w[m, j] (its dot + b2[e, n]) into out[m, n] (float32): the
  combine without another launch or atomics. At one token that is 2,880 / 16 RB programs, fewer than a
  large GPU has SMs for a stream of bytes: SPLIT_E gives each pair its program (grid (N / 16 RB, M TOPK))
  and adds into out with atomics (out zeroed first).

A token's pair reads its expert once for itself (column 0 of the MMA's 8; the other columns repeat it and
are not stored): at M tokens the kernels read M TOPK experts, as vllm/0007's do. The experts of one
matrix are stacked [E, ...] with a stride of w_expert value words and s_expert scale words (hopper_pack.py
packs one; vLLM's swizzle of the stacked [E, K, N] tensor has its own strides, which a patch must pass).
check_moe.py beside this file checks the numbers against float32 and times one layer on a GPU;
compile_probe.py --kernel moe compiles both kernels with no GPU.
"""

from hopper_gemv import _B_L, _MMA, _UNIT, NUM_WARPS, _idx, chunk_ptrs, k_loop
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

__all__ = ["NUM_WARPS", "moe_down_kernel", "moe_gate_up_kernel"]

# gate_up's epilogue: each thread two consecutive rows (a gate and its up) of the 8 columns
_PAIRS = gl.constexpr(gl.BlockedLayout([2, 8], [32, 1], [NUM_WARPS, 1], [1, 0]))


@gluon.jit
def _x_ptrs(x_ptr, row, stride):
    """The B operand's pointers of x row `row`, its first 64-K chunk a warp, in every one of the 8 columns."""
    xb = _idx(4, 0, _B_L, 3)
    return x_ptr + row * stride + (64 * xb + _idx(64, 1, _B_L, 3)) + 0 * _idx(8, 2, _B_L, 3), xb


@gluon.jit
def moe_gate_up_kernel(x_ptr, w_ptr, s_ptr, b_ptr, ids_ptr, act_ptr, k_chunks, row_words, s_row, w_expert,
                       s_expert, n_rows, stride_xm, stride_act, alpha, limit, TOPK: gl.constexpr,
                       RB: gl.constexpr = 2):
    """act[p, i] (bf16) = the SwiGLU of (h[2 i], h[2 i + 1]), h = x[p // TOPK] . W13[e] + b13[e] (float32),
    e = ids[p] (int32, [M, TOPK] row-major), for the 8 RB columns i of program 0's index; one program a pair
    p (program 1's index). x: bf16 [M, K] with K = 64 k_chunks; b_ptr: float32 [E, n_rows]."""
    pid_n = gl.program_id(0)
    p = gl.program_id(1)
    e = gl.load(ids_ptr + p)
    w_ptrs, s_ptrs, wb, sb = chunk_ptrs(w_ptr + e * w_expert, s_ptr + e * s_expert, pid_n, 0, row_words,
                                        s_row, RB)
    x_ptrs, xb = _x_ptrs(x_ptr, p // TOPK, stride_xm)
    acc = k_loop(w_ptrs, s_ptrs, x_ptrs, wb, sb, xb, k_chunks, RB)
    o_l: gl.constexpr = gl.SliceLayout(0, _MMA)
    on = 16 * RB * pid_n + _idx(16 * RB, 0, o_l, 2)
    h = gl.sum(acc, axis=0) * _UNIT + gl.load(b_ptr + e * n_rows + on + 0 * _idx(8, 1, o_l, 2))
    # rows 2 i and 2 i + 1 into one thread, then apart: [16 RB, 8] -> [8 RB, 8] gates and ups
    h = gl.convert_layout(h, _PAIRS)
    gate, up = gl.split(gl.permute(gl.reshape(h, [8 * RB, 2, 8]), [0, 2, 1]))
    gate = gl.minimum(gate, limit)
    up = gl.minimum(gl.maximum(up, -limit), limit)
    act = ((up + 1.0) * (gate / (1.0 + gl.exp(-alpha * gate)))).to(gl.bfloat16)
    a_l: gl.constexpr = act.type.layout
    ai = 8 * RB * pid_n + _idx(8 * RB, 0, a_l, 2)
    am = _idx(8, 1, a_l, 2)
    gl.store(act_ptr + p * stride_act + ai + 0 * am, act, mask=(am == 0) & (ai >= 0))  # column 0: the pair's


@gluon.jit
def _expert_out(act_ptr, w_ptr, s_ptr, b_ptr, ids_ptr, wts_ptr, p, pid_n, on, first, k_chunks, row_words,
                s_row, w_expert, s_expert, n_rows, stride_act, RB: gl.constexpr):
    """wts[p] (act[p] . W2[e] [n, :] + b2[e, n]) for pair p's expert e = ids[p] and this program's rows."""
    e = gl.load(ids_ptr + p)
    w_ptrs, s_ptrs, wb, sb = chunk_ptrs(w_ptr + e * w_expert, s_ptr + e * s_expert, pid_n, 0, row_words,
                                        s_row, RB)
    x_ptrs, xb = _x_ptrs(act_ptr, p, stride_act)
    acc = k_loop(w_ptrs, s_ptrs, x_ptrs, wb, sb, xb, k_chunks, RB)
    bias = gl.load(b_ptr + e * n_rows + on, mask=first, other=0.0)
    return gl.load(wts_ptr + p) * (gl.sum(acc, axis=0) * _UNIT + bias)


@gluon.jit
def moe_down_kernel(act_ptr, w_ptr, s_ptr, b_ptr, ids_ptr, wts_ptr, out_ptr, k_chunks, row_words, s_row,
                    w_expert, s_expert, n_rows, stride_act, stride_om, TOPK: gl.constexpr,
                    RB: gl.constexpr = 2, SPLIT_E: gl.constexpr = False):
    """out[m, n] (float32) = sum_j wts[m, j] (act[TOPK m + j] . W2[e_j] [n, :] + b2[e_j, n]), e_j = ids[m, j],
    act bf16 [M TOPK, K] (K = 64 k_chunks), for the 16 RB rows n of program 0's index. Program 1's index is
    the token m, whose experts the program runs one after the other (the combine in registers); with
    SPLIT_E it is the pair TOPK m + j, whose sum the program adds into out (which must start at zero): TOPK
    times the programs, for the GPU's width at a token or two, at the price of atomics."""
    pid_n = gl.program_id(0)
    o_l: gl.constexpr = gl.SliceLayout(0, _MMA)
    on = 16 * RB * pid_n + _idx(16 * RB, 0, o_l, 2) + 0 * _idx(8, 1, o_l, 2)
    first = (_idx(8, 1, o_l, 2) == 0) & (on >= 0)  # column 0: the token
    if SPLIT_E:
        p = gl.program_id(1)
        mine = _expert_out(act_ptr, w_ptr, s_ptr, b_ptr, ids_ptr, wts_ptr, p, pid_n, on, first, k_chunks,
                           row_words, s_row, w_expert, s_expert, n_rows, stride_act, RB)
        gl.atomic_add(out_ptr + (p // TOPK) * stride_om + on, mine, mask=first, sem="relaxed")
    else:
        m = gl.program_id(1)
        total = gl.zeros([16 * RB, 8], gl.float32, o_l)
        for j in range(TOPK):
            total += _expert_out(act_ptr, w_ptr, s_ptr, b_ptr, ids_ptr, wts_ptr, m * TOPK + j, pid_n, on,
                                 first, k_chunks, row_words, s_row, w_expert, s_expert, n_rows, stride_act,
                                 RB)
        gl.store(out_ptr + m * stride_om + on, total, mask=first)
