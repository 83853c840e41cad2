"""Probe, not part of the product: compiles hopper_gemv.py's hopper_gemv_kernel (a decode GEMV whose K loop
reads triton_kernels' Hopper MXFP4 layouts, see check_layout.py for where the values and scales sit), or with
--kernel moe hopper_moe.py's two MoE launches, ahead of time for sm_90a and sm_121a, with no GPU, and prints
one JSON line per kernel, architecture and RB (row blocks of 16 a program): registers, stack and local
memory (spills), shared memory, and the K loop's SASS per 32-bit weight word, by opcode class and opcode,
with the count of shared-memory instructions (LDS/STS/BAR) in the loop, which the register-only decode
should keep at zero. The K loop is the body of the kernel's shortest backward branch (the down kernel also
loops over its token's experts), counted as in lab/scripts/gpu/mma_gemv_probe/compile_probe.py.

In the serving image, from the repository root (Triton and its cuobjdump come from the image):

    docker run --rm -e CUDA_VISIBLE_DEVICES= -v "$PWD":/repo -w /repo --entrypoint python \\
        sparkserve/serve:ci lab/scripts/gpu/hopper_layout_probe/compile_probe.py [--out-dir DIR] \\
        [--rb 4] [--split-k 2] [--kernel moe] [arch ...]

arch: 90 and 121 unless named; --rb: 1, 2 or 4 (default: all three). The cubin, SASS, PTX and TTGIR of each
go to --out-dir (default: a new temporary directory, named on stderr); inside the container that directory
is lost with it unless it is a mounted path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "mma_gemv_probe"))
import hopper_gemv  # noqa: E402
import hopper_moe  # noqa: E402
from compile_probe import cubin_report  # noqa: E402  (mma_gemv_probe's)

SIG = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*i32", "out_ptr": "*fp32", "M": "i32", "k_chunks": "i32",
       "row_words": "i32", "s_row": "i32", "stride_xm": "i32", "stride_om": "i32", "b_ptr": "*fp32",
       "ids_ptr": "*i32", "act_ptr": "*bf16", "wts_ptr": "*fp32", "w_expert": "i32", "s_expert": "i32",
       "n_rows": "i32", "stride_act": "i32", "alpha": "fp32", "limit": "fp32"}
# multiples of 16 words for gpt-oss-120b (K 2880: 1440 value words a row, 8 * 92 scale words a row; an
# expert's words and rows, and the rows of act and out)
ALIGNED = {"row_words", "s_row", "stride_xm", "stride_om", "w_expert", "s_expert", "n_rows", "stride_act"}
# what each --kernel compiles: the GEMV, or the MoE's two launches (TOPK 4, gpt-oss's)
KERNELS = {"gemv": (("hopper_gemv", hopper_gemv.hopper_gemv_kernel, {}),),
           "moe": (("moe_gate_up", hopper_moe.moe_gate_up_kernel, {"TOPK": 4}),
                   ("moe_down", hopper_moe.moe_down_kernel, {"TOPK": 4, "SPLIT_E": 0}),
                   ("moe_down", hopper_moe.moe_down_kernel, {"TOPK": 4, "SPLIT_E": 1}))}


def compile_kernel(arch: int, consts: dict[str, int], fn: Any = hopper_gemv.hopper_gemv_kernel) -> Any:
    sig = {a: SIG[a] for a in fn.arg_names if a in SIG} | {c: "constexpr" for c in consts}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if a in SIG and (SIG[a].startswith("*") or a in ALIGNED)}
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": hopper_gemv.NUM_WARPS})


def report(arch: int, consts: dict[str, int], out_dir: str, name: str = "hopper_gemv",
           fn: Any = hopper_gemv.hopper_gemv_kernel) -> dict[str, Any]:
    k = compile_kernel(arch, consts, fn)
    pre = f"{name}_" + "_".join(f"{c.lower()}{v}" for c, v in consts.items()) + f"_sm{arch}"
    # a lane's 16-byte load (4 words) per row block and 64-K chunk, UNROLL chunks per loop iteration
    words = 4 * consts["RB"] * hopper_gemv.UNROLL
    stats, sass = cubin_report(k, os.path.join(out_dir, pre + ".cubin"), words, innermost=True)
    for ext, text in (("sass.txt", sass), ("ptx", k.asm["ptx"]), ("ttgir.mlir", k.asm["ttgir"])):
        with open(os.path.join(out_dir, f"{pre}.{ext}"), "w") as f:
            f.write(text)
    return {"kernel": name, "arch": arch, **consts, **stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", nargs="*", type=int, default=[90, 121], help="compute capabilities (90 121)")
    ap.add_argument("--out-dir", help="where the cubin, SASS, PTX and TTGIR go (default: a new temp dir)")
    ap.add_argument("--rb", type=int, action="append", choices=[1, 2, 4],
                    help="row blocks of 16 a program (repeatable; default 1, 2, 4)")
    ap.add_argument("--split-k", type=int, default=1,
                    help="runs of 64-K chunks, one a program (default 1; the GEMV's only)")
    ap.add_argument("--kernel", choices=sorted(KERNELS), default="gemv",
                    help="gemv: hopper_gemv_kernel; moe: hopper_moe.py's two launches (TOPK 4)")
    args = ap.parse_args()
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="hopper_layout_probe-")
    os.makedirs(out_dir, exist_ok=True)
    print(f"cubin, SASS, PTX, TTGIR: {out_dir}", file=sys.stderr)
    for rb in args.rb or [1, 2, 4]:
        for arch in args.arch:
            for name, fn, consts in KERNELS[args.kernel]:
                split = {"SPLIT_K": args.split_k} if args.kernel == "gemv" else {}
                print(json.dumps(report(arch, {**consts, "RB": rb, **split}, out_dir, name, fn)), flush=True)


if __name__ == "__main__":
    main()
