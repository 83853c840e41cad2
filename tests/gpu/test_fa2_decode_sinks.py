"""fa2 decode with attention sinks vs a float32 reference (gpt-oss shapes)."""

import json
import math
import random

import pytest
import torch
from proof_artifacts import artifact_path

if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
flashinfer = pytest.importorskip("flashinfer")

HQ, HKV, D, WINDOW = 64, 8, 64, 128
WS = 256 * 1024 * 1024


def ref_decode(q, k, v, sinks, window_left, sm_scale):
    # q [HQ,D]; k,v [L,HKV,D] float32; sinks [HQ] natural-log logits
    L = k.shape[0]
    g = HQ // HKV
    kk = k.repeat_interleave(g, dim=1).transpose(0, 1)  # [HQ,L,D]
    vv = v.repeat_interleave(g, dim=1).transpose(0, 1)
    s = torch.einsum("hd,hld->hl", q, kk) * sm_scale
    if window_left >= 0:
        pos = torch.arange(L, device=q.device)
        s = s.masked_fill(pos[None, :] < L - 1 - window_left, float("-inf"))
    m = torch.maximum(s.max(-1).values, sinks if sinks is not None else s.max(-1).values)
    p = torch.exp(s - m[:, None])
    den = p.sum(-1) + (torch.exp(sinks - m) if sinks is not None else 0)
    return torch.einsum("hl,hld->hd", p, vv) / den[:, None]


def run_case(batch_lens, page_size, kv_dtype, window_left, sinks, use_tc, seed=0):
    torch.manual_seed(seed)
    dev = "cuda"
    pages = [math.ceil(L / page_size) for L in batch_lens]
    total = sum(pages)
    kc = torch.randn(total, page_size, HKV, D, device=dev).to(torch.bfloat16)
    vc = torch.randn(total, page_size, HKV, D, device=dev).to(torch.bfloat16)
    perm = torch.randperm(total, device=dev, dtype=torch.int32)
    indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    last = torch.tensor([(L - 1) % page_size + 1 for L in batch_lens], dtype=torch.int32, device=dev)
    q = torch.randn(len(batch_lens), HQ, D, device=dev).to(torch.bfloat16)
    k_scale = 1.0
    if kv_dtype == torch.float8_e4m3fn:
        kc_k, vc_k = kc.to(kv_dtype), vc.to(kv_dtype)
        kc_ref, vc_ref = kc_k.float(), vc_k.float()
    else:
        kc_k, vc_k, kc_ref, vc_ref = kc, vc, kc.float(), vc.float()
    sm_scale = 1.0 / math.sqrt(D)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(WS, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=use_tc, backend="fa2"
    )
    w.plan(
        indptr,
        perm,
        last,
        HQ,
        HKV,
        D,
        page_size,
        window_left=window_left,
        q_data_type=torch.bfloat16,
        kv_data_type=kv_dtype,
        sm_scale=sm_scale,
        use_sinks=sinks is not None,
    )
    out = w.run(q, (kc_k, vc_k), sinks=sinks)
    refs = []
    for b, L in enumerate(batch_lens):
        idx = perm[indptr[b] : indptr[b + 1]].long()
        k = kc_ref[idx].reshape(-1, HKV, D)[:L]
        v = vc_ref[idx].reshape(-1, HKV, D)[:L]
        refs.append(ref_decode(q[b].float(), k, v, sinks, window_left, sm_scale * k_scale))
    return out.float(), torch.stack(refs)


def rel_err(out, ref):
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def _shapes():
    rng = random.Random(1234)
    cases = []
    for _ in range(24):
        bs = rng.choice([1, 1, 2, 4, 7])
        lens = [
            rng.choice([1, 2, 17, 127, 128, 129, 1000, 4096, 8192, rng.randint(1, 8192)]) for _ in range(bs)
        ]
        cases.append((lens, rng.choice([16, 32]), rng.choice([-1, WINDOW - 1]), rng.choice([True, False])))
    return cases


SHAPES = _shapes()
RESULTS: list[dict] = []
# test_single_decode_sinks_customize_api's cases: a key of their own, so "cases" stays the batch wrapper's.
SINGLE_RESULTS: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    # In a proof: keep every case's error in the record.
    out = artifact_path("fa2_decode_sinks.json")
    if out and (RESULTS or SINGLE_RESULTS):
        record: dict = {"gpu": torch.cuda.get_device_name(), "cases": RESULTS}
        if SINGLE_RESULTS:
            record["single_decode_cases"] = SINGLE_RESULTS
        out.write_text(json.dumps(record, indent=1))


# fp8 KV with bf16 q runs on the tensor-core path only (the CUDA-core decode has no fp8-KV/bf16-q build).
CASES = [(*s, kv) for s in SHAPES for kv in (torch.bfloat16, torch.float8_e4m3fn)
         if kv == torch.bfloat16 or s[3]]


@pytest.mark.parametrize("lens,page_size,window_left,use_tc,kv_dtype", CASES)
def test_fa2_decode_sinks(lens, page_size, window_left, use_tc, kv_dtype):
    sinks = (torch.randn(HQ, device="cuda") + 2.0).float()
    out, ref = run_case(lens, page_size, kv_dtype, window_left, sinks, use_tc)
    err = rel_err(out, ref)
    print(f"lens={lens} ps={page_size} wl={window_left} tc={use_tc} kv={kv_dtype} rel_err={err:.3e}")
    RESULTS.append(
        {
            "lens": lens,
            "page_size": page_size,
            "window_left": window_left,
            "tensor_cores": use_tc,
            "kv_dtype": str(kv_dtype),
            "rel_err": err,
        }
    )
    # bf16: output rounding (2^-8) + bf16 P in the PV MMA -> 1e-2.
    # fp8: the reference dequantizes the same e4m3 values, so only the kernel's
    # bf16 P / accumulation error remains; 2e-2 leaves 2x headroom over bf16.
    assert err <= (1e-2 if kv_dtype == torch.bfloat16 else 2e-2)


@pytest.mark.parametrize("use_tc", [True, False])
def test_sinks_change_output(use_tc):
    lens = [64, 300, 4096]
    sinks = (torch.randn(HQ, device="cuda") + 2.0).float() + 3.0  # ~N(5,1): dominant
    out_s, ref_s = run_case(lens, 16, torch.bfloat16, WINDOW - 1, sinks, use_tc)
    out_n, ref_n = run_case(lens, 16, torch.bfloat16, WINDOW - 1, None, use_tc)
    assert rel_err(ref_s, ref_n) > 0.1  # the reference itself differs a lot
    assert rel_err(out_s, out_n) > 0.1  # ignoring sinks would make these equal
    assert rel_err(out_s, ref_s) <= 1e-2


def test_split_kv_sink_applied_once():
    # one long request forces split-kv; a double-counted sink would shrink the output
    sinks = torch.full((HQ,), 3.0, device="cuda")
    for use_tc in (True, False):
        out, ref = run_case([8192], 16, torch.bfloat16, -1, sinks, use_tc)
        assert rel_err(out, ref) <= 1e-2


def _one_page_plan_args(dev):
    """plan()'s positional arguments for one request of one token in one 16-slot page."""
    indptr = torch.tensor([0, 1], dtype=torch.int32, device=dev)
    return (
        indptr,
        torch.zeros(1, dtype=torch.int32, device=dev),
        torch.ones(1, dtype=torch.int32, device=dev),
        HQ,
        HKV,
        D,
        16,
    )


def test_raises_when_sinks_not_planned():
    dev = "cuda"
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(WS, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=True, backend="fa2"
    )
    w.plan(*_one_page_plan_args(dev), q_data_type=torch.bfloat16)
    kc = torch.zeros(1, 16, HKV, D, dtype=torch.bfloat16, device=dev)
    q = torch.zeros(1, HQ, D, dtype=torch.bfloat16, device=dev)
    with pytest.raises(ValueError, match="sinks"):
        w.run(q, (kc, kc), sinks=torch.zeros(HQ, device=dev))


def test_raises_on_unsupported_combo():
    dev = "cuda"
    args = _one_page_plan_args(dev)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(WS, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=True, backend="fa3"
    )
    with pytest.raises(ValueError, match="fa3"):
        w.plan(*args, q_data_type=torch.bfloat16, use_sinks=True)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(WS, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=False
    )
    with pytest.raises(ValueError, match="soft_cap"):
        w.plan(*args, q_data_type=torch.bfloat16, logits_soft_cap=30.0, use_sinks=True)


# --- single-request decode (SingleDecodeWithKVCacheKernel) with the AttentionSink variant ---
# FlashInfer's own API never builds the single-request decode kernel with sinks
# (single_decode_with_kv_cache takes none; its module uses the default variant). A module built
# through the customization API with the AttentionSink variant is the one way to reach the patch's
# update_m_d() call in SingleDecodeWithKVCacheKernel (decode.cuh); without that call the kernel
# ignores the sink. SingleDecodeWithKVCacheDispatched splits KV into chunks of >= 256 rows once
# kv_len > 256 (one chunk per block, merged by MergeStates), so 1000, 8192 and 20011 run split-kv,
# where the sink must be counted once (on chunk 0) across the chunks.
SINGLE_LENS = [1, 200, 1000, 8192, 20011]
SINGLE_URI = "sparkserve_test_single_decode_attention_sink_bf16_hd64"


@pytest.fixture(scope="module")
def single_sink_decode():
    """single_decode_with_kv_cache_with_jit_module bound to the AttentionSink single-decode build:
    run(q, k, v, sink, sm_scale, window_left=...), with `sink` (float*) and `sm_scale` (double) the
    variant's params.sink / params.sm_scale."""
    import functools

    from flashinfer.decode import single_decode_with_kv_cache_with_jit_module
    from flashinfer.jit.attention import gen_customize_single_decode_module
    from flashinfer.jit.attention.variants import attention_sink_decl

    mod = gen_customize_single_decode_module(
        SINGLE_URI,
        torch.bfloat16,  # dtype_q
        torch.bfloat16,  # dtype_kv
        torch.bfloat16,  # dtype_o
        D,  # head_dim_qk
        D,  # head_dim_vo
        ["sink"],  # additional_tensor_names
        ["float"],  # additional_tensor_dtypes
        ["sm_scale"],  # additional_scalar_names
        ["double"],  # additional_scalar_dtypes
        "AttentionSink",
        attention_sink_decl["fa2"],
        pos_encoding_mode=0,
        use_sliding_window=True,  # the variant masks by params.window_left; -1 means full attention
        use_logits_soft_cap=False,
    ).build_and_load()
    return functools.partial(single_decode_with_kv_cache_with_jit_module, mod)


@pytest.mark.parametrize("window_left", [-1, WINDOW - 1])
@pytest.mark.parametrize("kv_len", SINGLE_LENS)
def test_single_decode_sinks_customize_api(single_sink_decode, kv_len, window_left):
    torch.manual_seed(kv_len)
    dev = "cuda"
    q = torch.randn(HQ, D, device=dev).to(torch.bfloat16)
    k = torch.randn(kv_len, HKV, D, device=dev).to(torch.bfloat16)
    v = torch.randn(kv_len, HKV, D, device=dev).to(torch.bfloat16)
    # Natural-log sink logits spread over 0..12 across the heads: the scaled scores are ~N(0,1), so the
    # low heads sit near the row max (~3-4) and the high ones outweigh even 20011 keys; at every kv_len
    # some heads have a sink weight near 1/2, where dropping the sink or counting it twice shows most.
    sinks = (torch.linspace(0.0, 12.0, HQ, device=dev) + 0.5 * torch.randn(HQ, device=dev)).float()
    sm_scale = 1.0 / math.sqrt(D)
    out = single_sink_decode(q, k, v, sinks, sm_scale, window_left=window_left).float()
    qf, kf, vf = q.float(), k.float(), v.float()
    ref = ref_decode(qf, kf, vf, sinks, window_left, sm_scale)
    err = rel_err(out, ref)
    # The inputs must make a kernel that drops the sink, or counts it twice, fail the tolerance.
    dropped = rel_err(ref_decode(qf, kf, vf, None, window_left, sm_scale), ref)
    twice = rel_err(ref_decode(qf, kf, vf, sinks + math.log(2.0), window_left, sm_scale), ref)
    print(
        f"single kv_len={kv_len} wl={window_left} rel_err={err:.3e} "
        f"(sink dropped: {dropped:.3f}, sink twice: {twice:.3f})"
    )
    SINGLE_RESULTS.append(
        {
            "kv_len": kv_len,
            "window_left": window_left,
            "rel_err": err,
            "ref_sink_dropped": dropped,
            "ref_sink_twice": twice,
        }
    )
    assert dropped > 0.2
    assert twice > 5e-2
    assert err <= 1e-2  # the bf16 tolerance of test_fa2_decode_sinks
