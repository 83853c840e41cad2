"""Probe, not part of the product: a candidate decode for vllm/0007's MoE GEMV on tensor cores. 1-8 token
rows times one MXFP4 expert matrix in vLLM Marlin's repacked layout, on tensor cores (mma.sync m16n8k16
bf16 -> fp32) from a Triton Gluon kernel, with the FP4 decode done in registers straight into the MMA
operand layout (no shared-memory round trip in the K loop). vllm/0007's kernels decode each nibble to an
fp32 and multiply-add on the CUDA cores, and their K loop's instructions (about 44 a weight word) bound
them (docs/porting/vllm-0007-moe-gemv.md); here two nibbles become one bf16 pair of an A fragment, one
packed multiply scales the pair, and mma.sync does the multiply-adds, so the instructions per word are
what this probe is about.

This module holds only the kernel; the scripts beside it exercise it (run from the repository root):

    python3 lab/scripts/gpu/mma_gemv_probe/compile_probe.py     SASS per weight word, no GPU needed
    python3 lab/scripts/gpu/mma_gemv_probe/cpu_selftest.py      decode emulation and test packer, CPU
    python3 lab/scripts/gpu/mma_gemv_probe/check_numerics.py    numerics and L2-cold speed, CUDA GPU
    lab/scripts/gpu/mma_gemv_probe/moe_kernel.py                the routed MoE form of this kernel

The MMA is the transposed product, out^T[n, m] = W[n, :] . x[m, :]: the weights are the A operand (M dim =
16 columns n, K = 16) and x^T is the B operand (K = 16, N = 8 tokens). Marlin's 16x64 tile is exactly four
A fragments of m16n8k16: lane t = 4 tc + r holds word tc*16 + r*4 + wp, whose nibbles are the A fragment of
the 16-column block wp:
    a0 = (row tc,   k 2r, 2r+1)   = nibbles (0, 4)      a2 = (row tc,   k 2r+8, 2r+9) = nibbles (1, 5)
    a1 = (row tc+8, k 2r, 2r+1)   = nibbles (2, 6)      a3 = (row tc+8, k 2r+8, 2r+9) = nibbles (3, 7)
(n = 16 wp + tc + 8 n8, k = 2 r + (i >> 2) + 8 (i & 1) for nibble i). One 16-byte load per lane gives a warp a
whole k-tile: 4 MMAs, one per 32-bit word. The B fragment (lane t: token t/4, k = 2(t%4)+{0,1} and +8,+9)
is a tiny gather of x (tokens >= M read as zero).

Decode of the nibble pair (i, i+4) (16 bits apart) into one bf16x2 register: the magnitude bits go to bf16
bits 8..6 (q shifted by 6 - 4i), the sign to bit 15 (from q & 0x80808080 or q & 0x08080808, shifted by
12 - 4i), merged by one LOP3 (mask 0x01C001C0: the sign word's other bits fall only inside that mask). The
result reads as the E2M1 value times 2^-126 exactly (E2M1 0.5 is a bf16 subnormal). One packed bf16 multiply
by 2^(s - 1 - D) (the E8M0 scale s and the 2^126, less 2^D) makes it v * 2^(s-127) * 2^-D exactly; the fp32
sums are multiplied by 2^D at the end. Exact for E8M0 s in [3, 136] (scales 2^-124 .. 2^9) with D = 8.

Work split: 4 warps; per K-loop iteration warp b takes scale group g = 4 it + b (two k-tiles, 32 K): two
16-byte weight loads, one 8-byte scale load, four 4-byte x loads per lane; 8 words -> 8 HMMA. The batch dim
of a rank-3 mma_v2 is the warp; the four partial sums are added after the loop (gl.sum over the batch dim).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.runtime.jit import constexpr_function

NUM_WARPS = 4
D_SHIFT = 8
UNIT = gl.constexpr(float(2 ** D_SHIFT))

# Outputs $0..$3: the A fragment registers a0..a3 (bf16x2), i.e. nibble pairs (0,4), (2,6), (1,5), (3,7).
# Inputs $4..$11: the word (8 copies, one per element of the pack), $12..$19: the scale register (copies):
# its low half is 2^(s-1-D) of row n8 = 0, its high half that of n8 = 1.
DECODE_ASM = gl.constexpr("""
{
.reg .b32 qa, qb, t, u, s0, s1, cm;
.reg .b16 lo, hi;
mov.b32 cm, 0x01C001C0;
and.b32 qa, $4, 0x80808080;
and.b32 qb, $4, 0x08080808;
mov.b32 {lo, hi}, $12;
mov.b32 s0, {lo, lo};
mov.b32 s1, {hi, hi};
shl.b32 t, $4, 6;
shl.b32 u, qb, 12;
lop3.b32 t, t, u, cm, 0xE4;
mul.rn.bf16x2 $0, t, s0;
shr.b32 t, $4, 2;
shl.b32 u, qb, 4;
lop3.b32 t, t, u, cm, 0xE4;
mul.rn.bf16x2 $1, t, s1;
shl.b32 t, $4, 2;
shl.b32 u, qa, 8;
lop3.b32 t, t, u, cm, 0xE4;
mul.rn.bf16x2 $2, t, s0;
shr.b32 t, $4, 6;
lop3.b32 t, t, qa, cm, 0xE4;
mul.rn.bf16x2 $3, t, s1;
}
""")
DECODE_CONSTRAINTS = gl.constexpr(",".join(["=r"] * 4 + ["r"] * 16))
# 2^(s - 1 - D) as bf16 bits in each half of a register: (s + 126 - D) << 7, from the scale word's bytes
# 0 and 2 (wp parity 0: n8 = 0, 1) or 1 and 3 (wp parity 1). Exact for s in [3, 136] with D = 8.
SC_BIAS = (126 - D_SHIFT) * 128 * 65537
SCALE0_ASM = gl.constexpr(f"{{ .reg .b32 t; and.b32 t, $1, 0x00FF00FF; mad.lo.u32 $0, t, 128, {SC_BIAS}; }}")
SCALE1_ASM = gl.constexpr(f"{{ .reg .b32 t; prmt.b32 t, $1, 0, 0x4341; mad.lo.u32 $0, t, 128, {SC_BIAS}; }}")


@constexpr_function
def _slice_to(layout, d, rank):
    """The 1-D layout of dim d of a rank-`rank` layout: every other dim sliced off, highest first."""
    for j in reversed(range(rank)):
        if j != d:
            layout = gl.SliceLayout(j, layout)
    return layout


@gluon.jit
def _idx(n: gl.constexpr, d: gl.constexpr, layout: gl.constexpr, rank: gl.constexpr):
    """arange(0, n) along dim d of a rank-`rank` tensor of `layout` (size 1 along the other dims)."""
    x = gl.arange(0, n, layout=_slice_to(layout, d, rank))
    for j in gl.static_range(rank):
        if j != d:
            x = gl.expand_dims(x, j)
    return x


@gluon.jit
def _dup3(t):
    """t with three new trailing dims of 2 (registers), every element the same value."""
    t2 = gl.join(t, t)
    t4 = gl.join(t2, t2)
    return gl.join(t4, t4)


@gluon.jit
def _decode(q, sc):
    """Words q [b, kt, tc, r, wph] (one wp parity) and their scale registers -> bf16
    [b, kt, tc, r, wph, k8, n8, k1]: one inline-asm instance per word (pack 8)."""
    q8 = _dup3(q)
    s8 = _dup3(gl.broadcast(sc, q)[0])
    return gl.inline_asm_elementwise(DECODE_ASM, DECODE_CONSTRAINTS, [q8, s8], gl.bfloat16, True, 8)


@gluon.jit
def _step(acc, w_ptrs, s_ptrs, x_ptrs, g_ok_w, g_ok_s, g_ok_x, H_L: gl.constexpr, A_L: gl.constexpr,
          MASKED: gl.constexpr):
    """One scale group per warp: 8 words a lane, 8 MMAs."""
    if MASKED:
        wv = gl.load(w_ptrs, mask=g_ok_w, other=0)
        sw = gl.load(s_ptrs, mask=g_ok_s, other=0)
        xv = gl.load(x_ptrs, mask=g_ok_x, other=0.0)
    else:
        wv = gl.load(w_ptrs)
        sw = gl.load(s_ptrs)
        xv = gl.load(x_ptrs)
    w0, w1 = gl.split(gl.reshape(wv, [4, 2, 8, 4, 2, 2]))  # wp = 2 wph + wpl
    w0 = gl.convert_layout(w0, H_L, assert_trivial=True)
    w1 = gl.convert_layout(w1, H_L, assert_trivial=True)
    sc0 = gl.inline_asm_elementwise(SCALE0_ASM, "=r,r", [sw], gl.int32, True, 1)
    sc1 = gl.inline_asm_elementwise(SCALE1_ASM, "=r,r", [sw], gl.int32, True, 1)
    sc0 = gl.expand_dims(gl.expand_dims(sc0, 1), 3)
    sc1 = gl.expand_dims(gl.expand_dims(sc1, 1), 3)
    a0 = _decode(w0, sc0)  # [b, kt, tc, r, wph, k8, n8, k1]
    a1 = _decode(w1, sc1)
    a = gl.join(a0, a1)  # [..., wpl]
    # -> [b, wph, wpl, n8, tc, kt, k8, r, k1] = [b, n, k]
    a = gl.permute(a, [0, 4, 8, 6, 2, 1, 5, 3, 7])
    a = gl.reshape(a, [4, 64, 32])
    a = gl.convert_layout(a, A_L, assert_trivial=True)
    return mma_v2(a, xv, acc)


@gluon.jit
def mma_gemv_kernel(x_ptr, w_ptr, s_ptr, out_ptr, M, k_tiles, row_words, s_row, stride_xm, stride_om,
                    UNROLL: gl.constexpr = 2, SPLIT_K: gl.constexpr = 1):
    """out[m, 64 pid_n + n] (fp32, m < M <= 8) = sum_k x[m, k] W[n, k] for the Marlin tile column
    pid_n = program_id(0) of one expert (w_ptr, s_ptr: the expert's first word and first scale word;
    k_tiles even). With SPLIT_K > 1, program_id(1) takes a contiguous range of scale groups and adds its
    partial sums into out (which must be zero) with atomics."""
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1, 1],
                                                  instr_shape=[1, 16, 8])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    # weight words [b (warp), kt, tc, r, wp]: lane 4 tc + r, 16 bytes (wp) a lane per k-tile
    W_L: gl.constexpr = gl.BlockedLayout([1, 2, 1, 1, 4], [1, 1, 8, 4, 1], [4, 1, 1, 1, 1], [4, 1, 3, 2, 0])
    # one wp parity of them: [b, kt, tc, r, wph]
    H_L: gl.constexpr = gl.BlockedLayout([1, 2, 1, 1, 2], [1, 1, 8, 4, 1], [4, 1, 1, 1, 1], [4, 1, 3, 2, 0])
    # scale words [b, tc, wph] (word 2 tc + wph of the group's 16): H_L without kt and r
    S_L: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(3, H_L))

    pid_n = gl.program_id(0)
    n_groups = k_tiles // 2
    if SPLIT_K > 1:
        per_split = gl.cdiv(gl.cdiv(n_groups, SPLIT_K), 4) * 4
        g_begin = gl.program_id(1) * per_split
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

    # x^T, the B operand [4 (b), 32 (k of the group), 8 (token)]; tokens >= M read row M - 1 (their
    # output columns are not stored), so the loop's loads need no mask.
    xb = _idx(4, 0, B_L, 3)
    xk = _idx(32, 1, B_L, 3)
    xm = _idx(8, 2, B_L, 3)
    x_ptrs = x_ptr + gl.minimum(xm, M - 1) * stride_xm + ((g_begin + xb) * 32 + xk)

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

    tot = gl.sum(acc, axis=0) * UNIT  # [64 (n), 8 (token)]
    O_L: gl.constexpr = gl.SliceLayout(0, MMA)
    on = _idx(64, 0, O_L, 2)
    om = _idx(8, 1, O_L, 2)
    o_ptrs = out_ptr + om * stride_om + pid_n * 64 + on
    o_ok = (om < M) & (on >= 0)
    if SPLIT_K > 1:
        gl.atomic_add(o_ptrs, tot, mask=o_ok, sem="relaxed")
    else:
        gl.store(o_ptrs, tot, mask=o_ok)
