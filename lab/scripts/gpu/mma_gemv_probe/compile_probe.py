"""Probe, not part of the product: vllm/0009's tensor-core K loop in the probe's kernels (mma_gemv.py and
moe_kernel.py beside this file). Compiles mma_gemv_kernel (--kernel gemv, the default) or
the routed mma_moe_gemv_kernel (--kernel moe, TOPK 4) ahead of time for sm_90a and sm_121a, with no GPU,
and prints one JSON line per architecture: registers, stack and local memory (spills), shared memory, and
the K loop's SASS per 32-bit weight word, by opcode class, with the count of shared-memory instructions
(LDS/STS/BAR) in the loop, which the register-only decode should keep at zero. The loop is found as the
gate test finds vllm/0007's (k_loop() in tests/image/test_mxfp4_moe_gemv_gate.py): the body of the
kernel's one backward branch.

In the serving image, from the repository root (Triton and its cuobjdump come from the image):

    docker run --rm -e CUDA_VISIBLE_DEVICES= -v "$PWD":/repo -w /repo --entrypoint python \\
        sparkserve/serve:ci lab/scripts/gpu/mma_gemv_probe/compile_probe.py [--out-dir DIR] \\
        [--kernel gemv|moe] [--split-k 1] [arch ...]

arch: 90 and 121 unless named. The cubin, SASS, PTX and TTGIR of each kernel and architecture go to --out-dir
(default: a new temporary directory, named on stderr); inside the container that directory is lost with
it unless it is a mounted path.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mma_gemv
import moe_kernel
from vllm.model_executor.layers.fused_moe.experts import mxfp4_moe_mma

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
CUOBJDUMP = os.path.join(BIN, "cuobjdump")

SIG = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*i32", "out_ptr": "*fp32", "M": "i32", "k_tiles": "i32",
       "row_words": "i32", "s_row": "i32", "stride_xm": "i32", "stride_om": "i32", "tab_ptr": "*i32",
       "w_estride": "i32", "s_estride": "i32"}
# multiples of 16 (pointers: 16-byte aligned); so are gpt-oss's (gate_up 192 * 11776 and 96 * 1472 words
# an expert, down 184 * 6144 and 92 * 768)
ALIGNED = {"row_words", "s_row", "stride_xm", "stride_om", "w_estride", "s_estride"}
KERNELS = {"gemv": (mma_gemv.mma_gemv_kernel, {}), "moe": (moe_kernel.mma_moe_gemv_kernel, {"TOPK": 4})}
PRED = r"^@!?U?P\w+\s+"
INSTRUCTION = r"/\*[0-9a-f]{4,}\*/\s+([^;]*);"


def compile_kernel(kernel: str, arch: int, consts: dict[str, int]) -> Any:
    fn = KERNELS[kernel][0]
    sig = {a: SIG[a] for a in fn.arg_names if a in SIG} | {c: "constexpr" for c in consts}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if a in SIG and (SIG[a].startswith("*") or a in ALIGNED)}
    src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": mma_gemv.NUM_WARPS})


def loop_body(sass: str, innermost: bool = False) -> list[str]:
    """The instructions of the kernel's one backward branch's body (innermost: of its shortest one, the K
    loop of a kernel that also loops over experts)."""
    ins = [(int(a, 16), op.strip()) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    where = {a: i for i, (a, _) in enumerate(ins)}
    loops = [(where[int(m.group(1), 16)], i) for i, (a, op) in enumerate(ins)
             if (m := re.search(r"\bBRA\S*\s.*?0x([0-9a-f]+)", op)) and int(m.group(1), 16) < a]
    assert len(loops) == 1 or (innermost and loops), loops
    lo, hi = min(loops, key=lambda span: span[1] - span[0])
    return [op for _, op in ins[lo:hi + 1]]


def opclass(op: str) -> str:
    op = re.sub(PRED, "", op)
    name = op.split()[0]
    base = name.split(".")[0]
    if base == "HMMA":
        return "HMMA"
    if base in ("LOP3", "ULOP3", "LOP"):
        return "LOP3"
    if base in ("SHF", "SHL", "SHR", "USHF") or name.startswith("IMAD.SHL"):
        return "SHF/SHL/SHR/IMAD.SHL"
    if base == "PRMT":
        return "PRMT"
    if base == "LDG":
        return "LDG"
    if base in ("LDS", "STS", "LDSM", "BAR"):
        return "LDS/STS/BAR"
    if base in ("FFMA", "FMUL", "HMUL2", "HFMA2", "FADD", "HADD2"):
        return "FFMA/FMUL/HMUL2"
    return "other"


def cubin_report(k: Any, path: str, words: int, innermost: bool = False) -> tuple[dict[str, Any], str]:
    """A compiled kernel's cubin written at `path`, and (its resources and the K loop's SASS per weight word,
    `words` the weight words a thread takes a loop iteration; its SASS). innermost: the K loop is the
    kernel's shortest loop (loop_body)."""
    with open(path, "wb") as f:
        f.write(k.asm["cubin"])

    def dump(flag: str) -> str:
        return subprocess.run([CUOBJDUMP, flag, path], capture_output=True, text=True, check=True).stdout

    usage = dict(re.findall(r"([A-Z]+):(\d+)", dump("-res-usage").split(k.metadata.name + ":")[1]))
    sass = dump("-sass")
    body = loop_body(sass, innermost)
    hist = collections.Counter(opclass(op) for op in body)
    ops = collections.Counter(re.sub(PRED, "", op).split()[0] for op in body)
    whole = collections.Counter(opclass(op) for op in re.findall(INSTRUCTION, sass))
    return {"REG": int(usage["REG"]), "STACK": int(usage["STACK"]), "LOCAL": int(usage["LOCAL"]),
            "SHARED": int(usage.get("SHARED", 0)), "loop_instructions": len(body),
            "words_per_thread_iter": words, "per_word": round(len(body) / words, 2),
            "loop_hist": dict(hist.most_common()),
            "loop_per_word": {c: round(n / words, 2) for c, n in hist.most_common()},
            "loop_opcodes": dict(ops.most_common()),
            "lds_sts_bar_in_loop": hist.get("LDS/STS/BAR", 0),
            "lds_sts_bar_in_kernel": whole.get("LDS/STS/BAR", 0)}, sass


def report(kernel: str, arch: int, consts: dict[str, int], out_dir: str) -> dict[str, Any]:
    k = compile_kernel(kernel, arch, consts)
    # the gemv kernel's files keep their names; the moe kernel's carry a prefix
    pre = "" if kernel == "gemv" else f"{kernel}_"
    # a lane's two 16-byte weight loads per scale group, UNROLL groups per loop iteration
    stats, sass = cubin_report(k, os.path.join(out_dir, f"{pre}mma_gemv_sm{arch}.cubin"),
                               8 * mxfp4_moe_mma.UNROLL)
    for fname, text in ((f"{pre}sass_sm{arch}.txt", sass), (f"{pre}ptx_sm{arch}.ptx", k.asm["ptx"]),
                        (f"{pre}ttgir_sm{arch}.mlir", k.asm["ttgir"])):
        with open(os.path.join(out_dir, fname), "w") as f:
            f.write(text)
    return {"kernel": kernel, "arch": arch, **consts, **stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", nargs="*", type=int, default=[90, 121], help="compute capabilities (90 121)")
    ap.add_argument("--out-dir", help="where the cubin, SASS, PTX and TTGIR go (default: a new temp dir)")
    ap.add_argument("--kernel", choices=sorted(KERNELS), default="gemv",
                    help="gemv: mma_gemv_kernel (one matrix); moe: mma_moe_gemv_kernel (routed, TOPK 4)")
    ap.add_argument("--split-k", type=int, default=1, help="the kernel's SPLIT_K")
    args = ap.parse_args()
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="mma_gemv_probe-")
    os.makedirs(out_dir, exist_ok=True)
    print(f"cubin, SASS, PTX, TTGIR: {out_dir}", file=sys.stderr)
    consts = KERNELS[args.kernel][1] | {"SPLIT_K": args.split_k}
    for arch in args.arch:
        print(json.dumps(report(args.kernel, arch, consts, out_dir)))


if __name__ == "__main__":
    main()
