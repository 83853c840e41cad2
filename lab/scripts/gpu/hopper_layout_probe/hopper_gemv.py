"""Probe, not part of the product: a decode GEMV (1-8 token rows times one expert's MXFP4 matrix) whose K loop
reads the weights and scales straight from triton_kernels' Hopper layouts (HopperMXValueLayout mma_version 3,
HopperMXScaleLayout num_warps 8: the copies vLLM's triton backend keeps on sm_90; check_layout.py beside
this file says where everything is and checks it on the CPU) and runs mma.sync m16n8k16 on them, in the
manner of vllm/0009's K loop over Marlin's layout. compile_probe.py beside this file compiles it with no GPU:

    docker run --rm -e CUDA_VISIBLE_DEVICES= -v "$PWD":/repo -w /repo --entrypoint python \\
        sparkserve/serve:ci lab/scripts/gpu/hopper_layout_probe/compile_probe.py

The product is transposed, out^T[n, m] = W[n, :] . x[m, :]: the weights are the A operand. A program takes
16 RB rows n (RB row blocks of 16: physical value rows 4 rb + q, q < 4); each of its 4 warps takes one
64-K chunk kc in turn (kc = warp, warp + 4, ...). For one (rb, kc) a lane l = 8 q + 4 s + t loads the
16 bytes of words 32 kc + 16 s + 4 t + kt (kt < 4) of row 4 rb + q: one word a k-tile 4 kc + kt, already
that MMA's A fragment (check_layout.py's claim). The load layout's lanes and registers are the dot
operand's, so the decoded tensor meets DotOperandLayout(0, k_width=2) through
convert_layout(assert_trivial=True) (a relabelling: permute and reshape only).

Per word: the bit untwiddle of triton_kernels' _unpack_fp4_to_bf16_triton (reg0..3 of the word are a0a1,
a2a3, a4a5, a6a7 times 2^-126) and one packed multiply a register by the E8M0 scale 2^(s - 1 - D)
(vllm/0009's scale scheme: D = 8, exact for s <= 136, the sums multiplied by 2^D at the end). The lane's
scale word holds the 4 scales its 4 words need ((row g, row g + 8) x (group 2 kc, 2 kc + 1)); two
registers hold them as bf16x2, {byte 0, byte 2} and {byte 1, byte 3} (two integer instructions each),
and each word's multiplies take the half of its group (k-tiles 0, 1: low halves; 2, 3: high halves).

The x rows are the B operand's N (8 columns: token m in column m, tokens >= M read row M - 1 and are not
stored); the warps' partial sums are added after the loop.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.runtime.jit import constexpr_function

NUM_WARPS = 4
UNROLL = 2  # 64-K chunks (one a warp) a K-loop iteration loads before its MMAs
MAX_SCALE_BYTE = 136  # the largest E8M0 byte the scale register holds exactly (s + 118 < 255)
_UNIT = gl.constexpr(256.0)  # 2^D
_UNROLL = gl.constexpr(UNROLL)

_MMA = gl.constexpr(gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1, 1],
                                               instr_shape=[1, 16, 8]))
_A_L = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=_MMA, k_width=2))
_B_L = gl.constexpr(gl.DotOperandLayout(operand_index=1, parent=_MMA, k_width=2))

# Outputs $0..$3: reg0..reg3 of the word times the row's scale (a0a1, a2a3, a4a5, a6a7: rows g, g + 8,
# g, g + 8). Inputs $4..$11: the word (8 copies, one per element of the pack), $12..$19: the scale
# register of row g ({group 2 kc, group 2 kc + 1}), $20..$27: of row g + 8. HALF: 0 (k-tiles 0, 1: group
# 2 kc, low halves) or 1 (high halves).
_DECODE = """
{{
.reg .b32 t, u, v, s0, s1, m;
.reg .b16 l0, h0, l1, h1;
mov.b32 m, 0x81C081C0;
mov.b32 {{l0, h0}}, $12;
mov.b32 {{l1, h1}}, $20;
mov.b32 s0, {{{r0}, {r0}}};
mov.b32 s1, {{{r1}, {r1}}};
and.b32 t, $4, m;
mul.rn.bf16x2 $0, t, s0;
shl.b32 t, $4, 3;
and.b32 t, t, m;
mul.rn.bf16x2 $1, t, s1;
shl.b32 t, $4, 6;
and.b32 t, t, m;
mul.rn.bf16x2 $2, t, s0;
shl.b32 t, $4, 1;
and.b32 t, t, 0x80008000;
shr.b32 u, $4, 3;
and.b32 u, u, 0x01800180;
shr.b32 v, $4, 7;
and.b32 v, v, 0x00400040;
or.b32 t, t, u;
or.b32 t, t, v;
mul.rn.bf16x2 $3, t, s1;
}}
"""
_DECODE_LO = gl.constexpr(_DECODE.format(r0="l0", r1="l1"))
_DECODE_HI = gl.constexpr(_DECODE.format(r0="h0", r1="h1"))
_DECODE_CONSTRAINTS = gl.constexpr(",".join(["=r"] * 4 + ["r"] * 24))
# 2^(s - 1 - D) as bf16 bits, (s + 126 - D) << 7, in each half: bytes 0 and 2 (row g) or 1 and 3 (g + 8)
_SC_BIAS = (126 - 8) * 128 * 65537
_SCALE_ASM = gl.constexpr(
    f"{{ .reg .b32 t; and.b32 t, $2, 0x00FF00FF; mad.lo.u32 $0, t, 128, {_SC_BIAS};"
    f" prmt.b32 t, $2, 0, 0x4341; mad.lo.u32 $1, t, 128, {_SC_BIAS}; }}"
)


@constexpr_function
def _w_layout(rb):
    """The words [warp (kc), rb, q, s, t, kt]: lane 8 q + 4 s + t, 16 bytes (kt) a lane per row block."""
    return gl.BlockedLayout([1, rb, 1, 1, 1, 4], [1, 1, 4, 2, 4, 1], [4, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1, 0])


@constexpr_function
def _h_layout(rb):
    """The words of one group [warp (kc), rb, q, s, t, ktl]: the words' layout with kt = 2 kg + ktl, kg
    split off."""
    return gl.BlockedLayout([1, rb, 1, 1, 1, 2], [1, 1, 4, 2, 4, 1], [4, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1, 0])


@constexpr_function
def _slice_to(layout, d, rank):
    """The 1-D layout of dim d of a rank-`rank` layout."""
    for j in reversed(range(rank)):
        if j != d:
            layout = gl.SliceLayout(j, layout)
    return layout


@constexpr_function
def _scale_layout(rb):
    """The scale words [warp, rb, q, s]: a group's words' layout less t and ktl."""
    return gl.SliceLayout(4, gl.SliceLayout(5, _h_layout(rb)))


@gluon.jit
def _idx(n: gl.constexpr, d: gl.constexpr, layout: gl.constexpr, rank: gl.constexpr):
    """arange(0, n) along dim d of a rank-`rank` tensor of `layout`."""
    x = gl.arange(0, n, layout=_slice_to(layout, d, rank))
    for j in gl.static_range(rank):
        if j != d:
            x = gl.expand_dims(x, j)
    return x


@gluon.jit
def _dup3(t):
    """t with three new trailing dims of 2, every element the same value."""
    t2 = gl.join(t, t)
    t4 = gl.join(t2, t2)
    return gl.join(t4, t4)


@gluon.jit
def _decode(q, sg, sg8, ASM: gl.constexpr):
    """Words q [b, rb, q, s, t, ktl] and the scale registers of rows g, g + 8 ([b, rb, q, s, 1, 1])
    -> bf16 [b, rb, q, s, t, ktl, k8, n8, k1]: one asm instance a word."""
    return gl.inline_asm_elementwise(
        ASM, _DECODE_CONSTRAINTS,
        [_dup3(q), _dup3(gl.broadcast(sg, q)[0]), _dup3(gl.broadcast(sg8, q)[0])], gl.bfloat16, True, 8)


@gluon.jit
def _step(acc, w_ptrs, s_ptrs, x_ptrs, ok_w, ok_s, ok_x, RB: gl.constexpr, MASKED: gl.constexpr):
    """One 64-K chunk a warp: 4 RB words a lane, 4 RB MMAs."""
    if MASKED:
        wv = gl.load(w_ptrs, mask=ok_w, other=0)
        sw = gl.load(s_ptrs, mask=ok_s, other=0)
        xv = gl.load(x_ptrs, mask=ok_x, other=0.0)
    else:
        wv = gl.load(w_ptrs)
        sw = gl.load(s_ptrs)
        xv = gl.load(x_ptrs)
    # kt = 2 kg + ktl: the k-tiles of group 2 kc (kg 0) and 2 kc + 1 (kg 1)
    H_L: gl.constexpr = _h_layout(RB)
    w_g0, w_g1 = gl.split(gl.permute(gl.reshape(wv, [4, RB, 4, 2, 4, 2, 2]), [0, 1, 2, 3, 4, 6, 5]))
    w_g0 = gl.convert_layout(w_g0, H_L, assert_trivial=True)
    w_g1 = gl.convert_layout(w_g1, H_L, assert_trivial=True)
    s_g, s_g8 = gl.inline_asm_elementwise(_SCALE_ASM, "=r,=r,r", [sw], (gl.int32, gl.int32), True, 1)
    s_g = gl.expand_dims(gl.expand_dims(s_g, 4), 5)
    s_g8 = gl.expand_dims(gl.expand_dims(s_g8, 4), 5)
    a = gl.join(_decode(w_g0, s_g, s_g8, _DECODE_LO), _decode(w_g1, s_g, s_g8, _DECODE_HI))
    # [b, rb, q, s, t, ktl, k8, n8, k1, kg] -> [b, rb, n8, q, s, kg, ktl, k8, t, k1]:
    # n = 16 rb + 8 n8 + 2 q + s, k = 32 kg + 16 ktl + 8 k8 + 2 t + k1
    a = gl.permute(a, [0, 1, 7, 2, 3, 9, 5, 6, 4, 8])
    a = gl.convert_layout(gl.reshape(a, [4, 16 * RB, 64]), _A_L, assert_trivial=True)
    return mma_v2(a, xv, acc)


@gluon.jit
def chunk_ptrs(w_ptr, s_ptr, pid_n, c_first, row_words, s_row, RB: gl.constexpr):
    """Where program pid_n's 64-K chunk c_first + warp sits in one matrix's value words (row-major
    [N / 4, row_words = K / 2]) and scale words (row-major [N_pad / 32, s_row = 8 G_pad]), and each load's
    warp index (for the masks of the last chunks)."""
    W_L: gl.constexpr = _w_layout(RB)
    S_L: gl.constexpr = _scale_layout(RB)
    wb = _idx(4, 0, W_L, 6)
    wrb = _idx(RB, 1, W_L, 6)
    wq = _idx(4, 2, W_L, 6)
    ws = _idx(2, 3, W_L, 6)
    wt = _idx(4, 4, W_L, 6)
    wkt = _idx(4, 5, W_L, 6)
    w_ptrs = (w_ptr + (4 * (RB * pid_n + wrb) + wq) * row_words
              + (32 * (c_first + wb) + 16 * ws + 4 * wt + wkt))
    sb = _idx(4, 0, S_L, 4)
    srb = RB * pid_n + _idx(RB, 1, S_L, 4)
    sg = 2 * _idx(4, 2, S_L, 4) + _idx(2, 3, S_L, 4)
    s_ptrs = s_ptr + (8 * (srb // 16) + srb % 8) * s_row + (16 * (c_first + sb) + 8 * ((srb // 8) % 2) + sg)
    return w_ptrs, s_ptrs, wb, sb


@gluon.jit
def k_loop(w_ptrs, s_ptrs, x_ptrs, wb, sb, xb, chunks, RB: gl.constexpr):
    """`chunks` 64-K chunks from the pointers chunk_ptrs gives (and x's, [4, 64, 8] of the B operand):
    [4, 16 RB, 8] partial sums a warp."""
    acc = gl.zeros([4, 16 * RB, 8], gl.float32, _MMA)
    n_full = chunks // (4 * _UNROLL)
    for _it in range(n_full):
        for _u in gl.static_range(_UNROLL):
            acc = _step(acc, w_ptrs, s_ptrs, x_ptrs, None, None, None, RB, False)
            w_ptrs += 128
            s_ptrs += 64
            x_ptrs += 256
    c0 = n_full * 4 * _UNROLL
    for u in gl.static_range(_UNROLL):  # the last chunks, masked
        if c0 + 4 * u < chunks:
            acc = _step(acc, w_ptrs, s_ptrs, x_ptrs, (c0 + 4 * u + wb) < chunks,
                        (c0 + 4 * u + sb) < chunks, (c0 + 4 * u + xb) < chunks, RB, True)
            w_ptrs += 128
            s_ptrs += 64
            x_ptrs += 256
    return acc


@gluon.jit
def hopper_gemv_kernel(x_ptr, w_ptr, s_ptr, out_ptr, M, k_chunks, row_words, s_row, stride_xm, stride_om,
                       RB: gl.constexpr = 4, SPLIT_K: gl.constexpr = 1):
    """out[m, 16 RB pid_n + n] (fp32, m < M <= 8) = sum_k x[m, k] W[n, k] for one expert in triton_kernels'
    Hopper layouts: w_ptr its value words (row-major [N / 4, row_words = K / 2]), s_ptr its scale words
    (row-major [N_pad / 32, s_row = 8 G_pad]); k_chunks = K / 64 (the layout pads K to 64: x must then
    be readable, and finite, up to 64 k_chunks). With SPLIT_K > 1, program (pid_n, pid_k) takes the pid_k-th
    of SPLIT_K runs of whole 64-K chunks and adds its sums into out, which must start at zero."""
    pid_n = gl.program_id(0)
    per_split = gl.cdiv(k_chunks, SPLIT_K)
    c_first = gl.program_id(1) * per_split
    my_chunks = gl.minimum(per_split, k_chunks - c_first)
    w_ptrs, s_ptrs, wb, sb = chunk_ptrs(w_ptr, s_ptr, pid_n, c_first, row_words, s_row, RB)
    xb = _idx(4, 0, _B_L, 3)
    xk = _idx(64, 1, _B_L, 3)
    xm = _idx(8, 2, _B_L, 3)
    x_ptrs = x_ptr + gl.minimum(xm, M - 1) * stride_xm + (64 * (c_first + xb) + xk)
    acc = k_loop(w_ptrs, s_ptrs, x_ptrs, wb, sb, xb, my_chunks, RB)

    o_l: gl.constexpr = gl.SliceLayout(0, _MMA)
    tot = gl.sum(acc, axis=0) * _UNIT
    on = _idx(16 * RB, 0, o_l, 2)
    om = _idx(8, 1, o_l, 2)
    o_ptrs = out_ptr + om * stride_om + 16 * RB * pid_n + on
    if SPLIT_K == 1:
        gl.store(o_ptrs, tot, mask=(om < M) & (on >= 0))
    else:
        gl.atomic_add(o_ptrs, tot, mask=(om < M) & (on >= 0), sem="relaxed")
