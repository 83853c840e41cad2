#!/usr/bin/env bash
# The GPU proofs of the patch series, on any GPU host with the pinned stack (the image, or a Python
# environment with the locked wheels and `sparkserve patches apply --site`: docs/GPU.md). Each proof runs
# under `sparkserve-lab proof run`, which records it in lab/results/<gpu>/ (command, output, artifacts, verdict,
# the patch manifest of PYTHON, the commit) and makes a skipped GPU test a failure. Stops at the first
# failing proof.
#
#   lab/scripts/gpu/proofs.sh [--python PYTHON] [--store DIR] [PROOF...]     (default: every proof below)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=python3
STORE=()
while (( $# )); do
    case $1 in
        --python) PY=$2; shift 2 ;;
        --store) STORE=(--store "$2"); shift 2 ;;
        -h|--help) sed -n 2,9p "$0"; exit 0 ;;
        *) break ;;
    esac
done
# sparkserve runs from this checkout with the stack's own Python, so it sees what the tests see.
export PYTHONPATH="$PWD/src:$PWD/lab/src${PYTHONPATH:+:$PYTHONPATH}"
SS=("$PY" -m sparkserve_lab)
V1=vllm/0001-triton-mxfp4-quantize-kernel-combine-masks-with-elementwise
V2=vllm/0002-quantize-lm-head-online-to-mxfp4-marlin-w4a16
V6=vllm/0006-router-logits-of-a-biased-gate-for-a-few-tokens-in-one-triton
V7=vllm/0007-gpt-oss-s-mxfp4-experts-for-decode-batches-in-two-triton-kernels
V8=vllm/0008-gpt-oss-s-mxfp4-experts-for-large-batches-as-two-triton-grouped
V9=vllm/0009-the-k-loop-of-gpt-oss-s-mxfp4-decode-experts-on-tensor-cores
V10=vllm/0010-gpt-oss-s-routing-for-a-few-tokens-in-one-triton-kernel-the-gate
F1=flashinfer/0001-honour-attention-sinks-in-fa2-batch-decode

proof() {  # proof NAME PROVES COMMAND...
    local name=$1 proves=$2; shift 2
    if (( ${#WANT[@]} )) && [[ " ${WANT[*]} " != *" $name "* ]]; then return 0; fi
    "${SS[@]}" proof run --name "$name" --proves "$proves" --python "$PY" ${STORE[@]+"${STORE[@]}"} ${KIND[@]+"${KIND[@]}"} -- "$@"
}
measurement() {  # a timing: recorded as kind measurement (it still fails on kernel errors or disagreement)
    KIND=(--measurement); proof "$@"; KIND=()
}
KIND=()
WANT=("$@")
proof vllm-0001-quant-mask-bit-identical "$V1" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_mxfp4_quant_mask_patch.py
proof lm-head-numerics "$V2" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_lm_head_mxfp4_numerics.py
proof fa2-decode-sinks-numerics "$F1" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_fa2_decode_sinks.py
measurement decode-sinks-kernel-bench "$F1" "$PY" lab/scripts/gpu/bench_decode_sinks.py
# QKV, O and lm_head GEMMs, BF16 vs MXFP4 (Marlin, Humming), weights rotated out of L2.
measurement linear-kernels-l2-cold "$V2" "$PY" lab/scripts/gpu/bench_linear.py
# gpt-oss's router: the Triton GEMV with its bias against F.linear, numbers and L2-cold time.
proof router-gemv-kernel "$V6" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_router_gemv_kernel.py
measurement router-gemv-sweep "$V6" "$PY" lab/scripts/gpu/sweep_router_gemv.py
# gpt-oss's routing in one launch (GEMV, bias, top-k, softmax) against vllm/0006's GEMV and topk_softmax.
proof router-topk-kernel "$V10" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_router_topk_kernel.py
# gpt-oss's MXFP4 experts at 1-8 tokens: the two Triton kernels over Marlin's weights against float32 and
# Marlin (numbers), then their L2-cold time per layer against Marlin's and the bytes' time (with --sweep).
proof moe-gemv-kernels "$V7" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_mxfp4_moe_gemv.py \
    -k "not mxfp4_moe_mma"
measurement moe-gemv-bench "$V7" "$PY" lab/scripts/gpu/bench_moe_gemv.py --sweep
# The same with the tokens of a call on the same 4 experts: Marlin reads each once, the kernels once a token.
measurement moe-gemv-bench-shared "$V7" "$PY" lab/scripts/gpu/bench_moe_gemv.py --shared
# The same kernels with their K loop on tensor cores (Gluon, mma.sync): numbers, then time with the K splits
# at every batch they serve (the K splits a batch size should take).
proof moe-mma-kernels "$V9" "$PY" -m pytest -q -s -p no:cacheprovider tests/gpu/test_mxfp4_moe_gemv.py \
    -k mxfp4_moe_mma
measurement moe-mma-bench "$V9" "$PY" lab/scripts/gpu/bench_moe_gemv.py --kernels mma --sweep \
    --m 1,2,3,4,5,6,7,8
# Their K loop alone on one matrix: the ends of the E8M0 scale range its decode is exact for, vLLM's words.
measurement moe-mma-gemv-probe "$V9" "$PY" lab/scripts/gpu/mma_gemv_probe/check_numerics.py
# The same loop over triton_kernels' Hopper layout, the copy stock vLLM's triton backend keeps (a probe, not
# in the series): numbers, then L2-cold time against the bytes' and matmul_ogs' on the same weights.
measurement hopper-layout-gemv-probe "$V9" "$PY" lab/scripts/gpu/hopper_layout_probe/check_gemv.py
# gpt-oss's MoE for 1-8 tokens over that layout in two launches (gate_up with the SwiGLU, down with the
# combine; a probe): numbers against float32, then one layer's L2-cold time against its bytes'.
measurement hopper-layout-moe-probe "$V9" "$PY" lab/scripts/gpu/hopper_layout_probe/check_moe.py
# gpt-oss's MXFP4 experts at prefill batches (64-8,192 tokens): the two Triton grouped GEMMs over Marlin's
# weights against float32 and Marlin (numbers, padded tokens) and Marlin's time, with other tile shapes.
measurement moe-gemm-bench "$V8" "$PY" lab/scripts/gpu/bench_moe_gemm.py --sweep
# Hunk mutation (docs/DEV.md, "patches mutate"): reverts each hunk of a patch in PYTHON's site-packages,
# runs the patch's Proof tests, puts it back. Only when named: mutate-vllm-0001, mutate-vllm-0002,
# mutate-flashinfer-0001 (lab/scripts/gpu/proofs.sh --python PY mutate-vllm-0001), and
# mutate-flashinfer-0001-single-decode: the one hunk the whole table left surviving (the single-request
# decode kernel's sink update), against the test added for it.
site_of() {  # site_of PACKAGE: the site-packages PYTHON imports it from (PYTHONPATH's first, on a lent host)
    "$PY" -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('$1').origin).parents[1])"
}
mutation() {  # mutation NAME PROVES PATCH [patches mutate options...]
    [[ " ${WANT[*]} " == *" $1 "* ]] || return 0
    local name=$1 proves=$2 patch=$3; shift 3
    proof "$name" "$proves" "${SS[@]}" mutate "$patch" --site "$(site_of "${patch%%/*}")" --python "$PY" "$@"
}
mutation mutate-vllm-0001 "$V1" vllm/0001
mutation mutate-vllm-0002 "$V2" vllm/0002
mutation mutate-flashinfer-0001 "$F1" flashinfer/0001
mutation mutate-flashinfer-0001-single-decode "$F1" flashinfer/0001 --hunk include/flashinfer/attention/decode.cuh:363
# Upstream's own tests of the files the series changes, unpatched then patched in PYTHON's site (docs/GPU.md
# section 3), the GPU subsets; only when named: upstream-tests-vllm-gpu, upstream-tests-flashinfer-gpu.
# Paced: UT_JOBS files at a time (6), UT_FILE_TIMEOUT s a file (120), files started within UT_STATE_MINUTES
# a state (10); UT_RESUME=RECORD runs what that record did not compare; UT_TOGETHER=1 runs both states at
# once (UT_JOBS files each). VLLM_TREE / FI_TREE: dev trees
# (default: made from the sdist, which offline must be in SPARKSERVE_CACHE/sources). FlashInfer borrows the
# tests of FI_TESTS (a checkout's folder holding tests/) at version FI_TESTS_VERSION.
upstream_tests() {  # upstream_tests UPSTREAM ARGS...
    local up=$1 f b; shift
    local proves=()
    for f in patches/"$up"/0*.patch; do b=${f##*/}; proves+=(--proves "$up/${b%.patch}"); done
    "${SS[@]}" proof run --name "upstream-tests-$up-gpu" "${proves[@]}" --python "$PY" ${STORE[@]+"${STORE[@]}"} -- \
        "${SS[@]}" proof upstream-tests --site "$(site_of "$up")" --upstream "$up" --python "$PY" --subset gpu \
        --jobs "${UT_JOBS:-6}" --file-timeout "${UT_FILE_TIMEOUT:-120}" --state-minutes "${UT_STATE_MINUTES:-10}" \
        ${UT_RESUME:+--resume "$UT_RESUME"} ${UT_TOGETHER:+--states-together} "$@"
}
if [[ " ${WANT[*]} " == *" upstream-tests-vllm-gpu "* ]]; then
    upstream_tests vllm --skip-changed vllm/envs.py ${VLLM_TREE:+--tree "$VLLM_TREE"}
fi
if [[ " ${WANT[*]} " == *" upstream-tests-flashinfer-gpu "* ]]; then
    : "${FI_TESTS:?FI_TESTS: a folder holding the tests/ of a FlashInfer checkout (docs/GPU.md section 3)}"
    : "${FI_TESTS_VERSION:?FI_TESTS_VERSION: the version of those tests}"
    # one decode module JIT-built in each state before its tests: a host whose CUDA toolchain cannot build
    # stops there, with the compiler's output, instead of failing every test
    FI_PREFLIGHT=${FI_PREFLIGHT:-'import torch, flashinfer
q = torch.randn(8, 128, device="cuda", dtype=torch.float16)
k = torch.randn(64, 8, 128, device="cuda", dtype=torch.float16)
flashinfer.single_decode_with_kv_cache(q, k, k)'}
    upstream_tests flashinfer --tests-from "$FI_TESTS" --tests-version "$FI_TESTS_VERSION" \
        --state-dir-var FLASHINFER_WORKSPACE_BASE ${FI_TREE:+--tree "$FI_TREE"} --preflight "$FI_PREFLIGHT"
fi
