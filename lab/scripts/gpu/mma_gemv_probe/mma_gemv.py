"""Probe, not part of the product: vllm/0009's tensor-core K loop (mxfp4_moe_mma._k_loop in the patched vLLM:
its docstring says how the Marlin words become mma.sync's A operand) on a plain GEMV of 1-8 token rows times
one MXFP4 matrix in Marlin's layout, so the loop's numbers and speed can be taken on their own, apart from
the MoE's routing and epilogues. Needs the patched vLLM (vllm/0009) importable.

The scripts beside this file exercise it (run from the repository root):

    python3 lab/scripts/gpu/mma_gemv_probe/compile_probe.py     SASS per weight word, no GPU needed
    python3 lab/scripts/gpu/mma_gemv_probe/cpu_selftest.py      decode emulation and test packer, CPU
    python3 lab/scripts/gpu/mma_gemv_probe/check_numerics.py    numerics and L2-cold speed, CUDA GPU
    lab/scripts/gpu/mma_gemv_probe/moe_kernel.py                the routed MoE form of this kernel

The x rows are the B operand's N (8 columns: token m in column m, tokens >= M read row M - 1 and are not
stored); the 4 warps' partial sums are added after the loop.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from vllm.model_executor.layers.fused_moe.experts.mxfp4_moe_mma import (
    _B_L,
    _MMA,
    _UNIT,
    NUM_WARPS,
    _group_range,
    _idx,
    _k_loop,
)

__all__ = ["NUM_WARPS", "mma_gemv_kernel", "outputs"]


@gluon.jit
def outputs(acc):
    """The MMA's sums -> [64 (n), 8 (MMA column)] fp32 (the warps added, 2^D applied), and the n and column
    indices of that layout."""
    o_l: gl.constexpr = gl.SliceLayout(0, _MMA)
    return gl.sum(acc, axis=0) * _UNIT, _idx(64, 0, o_l, 2), _idx(8, 1, o_l, 2)


@gluon.jit
def mma_gemv_kernel(x_ptr, w_ptr, s_ptr, out_ptr, M, k_tiles, row_words, s_row, stride_xm, stride_om,
                    SPLIT_K: gl.constexpr = 1):
    """out[m, 64 pid_n + n] (fp32, m < M <= 8) = sum_k x[m, k] W[n, k] for the Marlin tile column
    pid_n = program_id(0) of one expert (w_ptr, s_ptr: the expert's first word and first scale word;
    k_tiles even). With SPLIT_K > 1, program_id(1) takes a contiguous range of scale groups and adds its
    partial sums into out (which must be zero) with atomics."""
    pid_n = gl.program_id(0)
    g_begin, g_end = _group_range(gl.program_id(1), k_tiles, SPLIT_K)
    xb = _idx(4, 0, _B_L, 3)
    xk = _idx(32, 1, _B_L, 3)
    xm = _idx(8, 2, _B_L, 3)
    x_ptrs = x_ptr + gl.minimum(xm, M - 1) * stride_xm + ((g_begin + xb) * 32 + xk)
    acc = _k_loop(x_ptrs, xb, w_ptr + pid_n * 128, s_ptr + pid_n * 16, g_begin, g_end, row_words, s_row)
    tot, on, om = outputs(acc)
    o_ptrs = out_ptr + om * stride_om + pid_n * 64 + on
    o_ok = (om < M) & (on >= 0)
    if SPLIT_K > 1:
        gl.atomic_add(o_ptrs, tot, mask=o_ok, sem="relaxed")
    else:
        gl.store(o_ptrs, tot, mask=o_ok)
