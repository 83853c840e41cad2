"""One line per proof record for docs/PROOFS.md, computed from the artifacts the proving command wrote
(not from words stored beside them): what was compared, how many cases, the largest error, the times.
A record without a known artifact has no computed line; the report then shows the stored summary, if any.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkserve_lab import gzfile

# Kernel class names as the benches store them, shortened for a table cell.
_SHORT = {"MarlinMxFp4LinearKernel": "Marlin", "HummingMxFp4LinearKernel": "Humming", "bf16": "BF16"}
_SINK_KERNELS = {"xqa_sinks": "XQA", "fa2_cuda_core_sinks": "fa2 CUDA-core",
                 "fa2_tc_sinks": "fa2 tensor-core", "fa3_sinks": "FA3"}


def _mutations(d: dict[str, Any]) -> str:
    hunks = d.get("hunks") or []
    by: dict[str, int] = {}
    for h in hunks:
        by[str(h.get("status"))] = by.get(str(h.get("status")), 0) + 1
    rest = ", ".join(f"{n} {s}" for s, n in sorted(by.items()) if s not in ("caught", "survived"))
    return (f"{len(hunks)} hunk(s) reverted one at a time: {by.get('caught', 0)} caught, "
            f"{by.get('survived', 0)} survived" + (f", {rest}" if rest else ""))


def _upstream_tests(d: dict[str, Any]) -> str:
    parts = []
    for name, u in sorted(d.items()):
        files = sorted({f for fs in (u.get("selected") or {}).values() for f in fs})
        tests = u.get("tests")
        count = tests if isinstance(tests, int) else len(tests or [])
        left = u.get("left_out") or {}
        partial = u.get("partial") or {}
        kept = [f for f in files if f not in left]
        every = len(set(files) | set(left))
        compared = f"{len(kept)} of {every} selected files" if left else f"{len(files)} files"
        flips = u.get("flips") or []
        carried = sum(1 for f in flips if f.get("carried"))
        parts.append(f"{name}: {count} tests of {compared}, unpatched then patched: "
                     f"{len(flips)} changed outcome(s)"
                     + (f" ({carried} carried by the series, {len(flips) - carried} not)" if flips else "")
                     + f", {len(u.get('environmental') or [])} failing in both (listed with their reason)"
                     + (f"; {len(partial)} of those files stopped at the per-file limit, compared on the "
                        "tests both states got through" if partial else "")
                     + (f"; {len(left)} files left out, each with why" if left else ""))
    return "; ".join(parts)


def _linear_kernels(d: dict[str, Any]) -> str:
    cells = []
    for layer in d.get("layers") or []:
        row = next((r for r in layer.get("rows") or [] if r.get("m") == 1), None)
        if row is None:
            continue
        times = [f"{_SHORT.get(k, k)} {v['median_us']:.1f}" for k, v in row.items()
                 if isinstance(v, dict) and not k.endswith("_l2_warm") and "median_us" in v]
        cells.append(f"{layer.get('layer')} {' / '.join(times)}")
    errors = [f"{layer.get('layer')} {k.replace('MxFp4LinearKernel', '')}: {v}"
              for layer in d.get("layers") or [] for k, v in (layer.get("errors") or {}).items()]
    return ("M=1, weights rotated out of L2, median us: " + "; ".join(cells)
            + (f"; errors: {'; '.join(errors)}" if errors else ""))


def _decode_sinks_bench(d: dict[str, Any]) -> str:
    times = ", ".join(f"{_SINK_KERNELS.get(k, k)} {v:.2f}" for k, v in sorted(
        (d.get("results_us") or {}).items(), key=lambda kv: kv[1]))
    errs = d.get("max_abs_diff_vs_reference") or {}
    worst = f"; largest difference from the float32 reference {max(errs.values()):.2g}" if errs else ""
    problems = [str(p) for p in d.get("problems") or []]
    problems += [f"{k}: {v}" for k, v in (d.get("errors") or {}).items()]
    return (f"batch {d.get('batch')}, {d.get('context')} context: {times} us{worst}"
            + (f"; problems: {'; '.join(problems)}" if problems else ""))


def _lm_head_numerics(d: dict[str, Any]) -> str:
    return (f"{d.get('kernel')}: max rel err {float(d['max_rel_err']):.3g} against the dequantized reference "
            f"over {len(d.get('per_m') or [])} batch sizes; top-1 agreement with BF16 "
            f"{float(d['mean_top1_agree_vs_bf16']):.2f} (random weights)")


def _quant_mask(d: dict[str, Any]) -> str:
    cases = d.get("cases") or []
    same = sum(bool(c.get("packed_identical")) and bool(c.get("scales_identical")) for c in cases)
    warn = d.get("warnings") or {}
    return (f"{same}/{len(cases)} cases bit-identical to the unpatched kernel; deprecation warnings: "
            f"unpatched {len(warn.get('unpatched') or [])}, patched {len(warn.get('patched') or [])}")


def _fa2_decode_sinks(d: dict[str, Any]) -> str:
    cases = d.get("cases") or []
    worst: dict[str, float] = {}
    for c in cases:
        kind = "fp8 KV" if "float8" in str(c.get("kv_dtype")) else "bf16"
        worst[kind] = max(worst.get(kind, 0.0), float(c.get("rel_err", 0.0)))
    errs = ", ".join(f"{k} {v:.2g}" for k, v in sorted(worst.items()))
    return f"{len(cases)} shapes against a float32 reference: max rel err {errs}"


def _by_m(rows: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return sorted(((int(m), r) for m, r in rows.items()), key=lambda mr: mr[0])


def _router_gemv(d: dict[str, Any]) -> str:
    rows = _by_m(d.get("rows") or {})
    times = ", ".join(f"M={m} {r['kernel']['median_us']:.2f} / {r['linear']['median_us']:.2f}"
                      for m, r in rows)
    within = sum(bool(r.get("kernel_within")) for _, r in rows)
    worst = max((float(r["kernel_err"]) for _, r in rows), default=0.0)
    return (f"weights rotated out of L2, median us Triton GEMV / F.linear: {times}; within the bound at "
            f"{within}/{len(rows)} sizes, largest error {worst:.2g}")


def _moe_gemv_numerics(d: dict[str, Any]) -> str:
    rows = _by_m(d.get("rows") or {})
    within = sum(bool(r.get("within")) for _, r in rows)
    errs = ", ".join(f"M={m} {float(r['err']):.2g} / {float(r['marlin_err']):.2g}" for m, r in rows)
    return (f"{within}/{len(rows)} batch sizes within the bound; largest error against float32, kernels / "
            f"Marlin: {errs}")


def _moe_gemv_bench(d: dict[str, Any]) -> str:
    rows = sorted(d.get("rows") or [], key=lambda r: int(r["m"]))
    plain: list[str] = []  # the kernels as they default
    best: dict[int, dict[str, Any]] = {}  # with --sweep: the fastest K splits and tiles per step at each M
    without: dict[str, list[str]] = {}  # kernels that could switch off their L2 prefetch and dependent launch
    for r in rows:
        kw, m, us = r.get("kernel_kw") or {}, int(r["m"]), r["gemv"]["median_us"]
        if not kw:
            plain.append(f"M={r['m']} {us:.1f} / {r['marlin']['median_us']:.1f} / {r['byte_time_us']:.1f} "
                         f"({r['gemv_fraction_of_bandwidth']:.2f} of the bandwidth)")
        elif "split_k_gate_up" in kw:
            if m not in best or us < best[m]["gemv"]["median_us"]:
                best[m] = r
        elif "prefetch" in kw:
            off = [name for key, name in (("prefetch", "the L2 prefetch"), ("pdl", "the dependent launch"))
                   if not kw.get(key, True)]
            without.setdefault(" and ".join(off), []).append(f"M={r['m']} {us:.1f}")
    cells = ", ".join(plain)
    variants = "".join(f"; without {label}: {', '.join(times)}" for label, times in without.items())
    def knobs(kw: dict[str, Any]) -> str:  # the tensor-core kernels have no tiles per step
        tiles = f", {kw['tiles_per_step']} tiles a step" if "tiles_per_step" in kw else ""
        return f"{kw.get('split_k_gate_up')}/{kw.get('split_k_down')} K splits{tiles}"

    swept = ", ".join(f"M={m} {r['gemv']['median_us']:.1f} ({knobs(r['kernel_kw'])})"
                      for m, r in sorted(best.items()))
    shared = any(r.get("routing") == "shared" for r in rows)
    routing = ", the tokens of a call on the same 4 experts" if shared else ""
    kernels = " (the K loop on tensor cores)" if d.get("kernels") == "mma" else ""
    return (f"one layer, experts rotated out of L2{routing}, median us kernels{kernels} / Marlin / the "
            f"bytes' time at {float(d.get('copy_bandwidth_gb_s', 0)):.0f} GB/s: {cells}" + variants
            + (f"; the sweep's fastest: {swept}" if swept else ""))


def _moe_gemm_bench(d: dict[str, Any]) -> str:
    rows = [r for r in d.get("rows") or [] if "gemm" in r]
    best: dict[int, dict[str, Any]] = {}  # the fastest tile shape at each M
    for r in rows:
        if int(r["m"]) not in best or r["gemm"]["median_us"] < best[int(r["m"])]["gemm"]["median_us"]:
            best[int(r["m"])] = r

    def shape(c: dict[str, Any]) -> str:
        return f"{c['block_m']}x{c['block_n']}x{c['block_k']}, {c['num_warps']} warps"

    cells = ", ".join(f"M={m} {r['gemm']['median_us']:.0f} / {r['marlin']['median_us']:.0f} "
                      f"({r['speedup']:.2f}x; {shape(r['config'])})" for m, r in sorted(best.items()))
    agree = sum(bool(r.get("agrees")) for r in rows)
    top = best[max(best)] if best else None
    peak = (f"; at M={max(best)} {top['gemm_tflops']:.0f} against {top['marlin_tflops']:.0f} TFLOP/s"
            if top else "")
    return (f"one layer, median us of the grouped GEMMs at their fastest tile shape / Marlin: {cells}{peak}; "
            f"within the bound with padded rows zero in {agree}/{len(rows)} runs")


def _mma_gemv_probe(d: dict[str, Any]) -> str:
    """lab/scripts/gpu/mma_gemv_probe/check_numerics.py: each matrix at the fewest k-tiles it was read at
    (gate_up without Marlin's K padding), its fastest K split at each M."""
    rows = d.get("timing") or []
    fewest: dict[str, int] = {}
    for r in rows:
        fewest[r["mat"]] = min(int(r["k_tiles"]), fewest.get(r["mat"], int(r["k_tiles"])))
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        key = (str(r["mat"]), int(r["M"]))
        if int(r["k_tiles"]) == fewest[key[0]] and (key not in best or r["us"] < best[key]["us"]):
            best[key] = r
    experts = int(d.get("experts") or max(int(r["N"]) for r in rows if r["mat"] == "gate_up") // 5888)
    mats = []
    for mat in ("gate_up", "down"):
        cells = ", ".join(f"M={m} {r['us']:.1f} ({r['of_copy_bw']:.2f}; split {r['split_k']})"
                          for (name, m), r in sorted(best.items()) if name == mat)
        if cells:
            n = next(r["N"] for (name, _), r in best.items() if name == mat)
            mats.append(f"{mat} {n} x {16 * fewest[mat]}: {cells}")
    checks = [*(d.get("cases") or []), *(d.get("checks") or [])]
    worst = max((float(c.get("rel", 0)) for c in checks), default=0.0)
    return (f"tensor-core GEMV, one launch a matrix of {experts} expert(s)' columns (the M tokens on all of "
            "it), weights rotated out of L2, "
            f"median us (fraction of {float(d.get('copy_bw_GBps', 0)):.0f} GB/s; fastest K split): "
            + "; ".join(mats)
            + f"; numbers within the bound in {sum(bool(c.get('ok')) for c in checks)}/{len(checks)} cases, "
            f"largest error {worst:.1e} of the largest output")


def _router_topk(d: dict[str, Any]) -> str:
    """tests/gpu/test_router_topk_kernel.py: vllm/0010's one launch against vllm/0006's GEMV + topk_softmax
    (1-4 tokens, exact) or a float32 reference (5-8), and its time against those two launches."""
    rows = _by_m(d.get("rows") or {})
    same = sum(bool(r["eager"]["ids_equal"] and r["graph_ids_equal"]) for _, r in rows)
    err = {kind: max((max(float(r["eager"]["weight_err"]), float(r["graph_weight_err"])) for _, r in rows
                      if r["against"] == kind), default=None) for kind in {r["against"] for _, r in rows}}
    errs = "; ".join(f"weights within {e:.1g} of {kind}" for kind, e in sorted(err.items()) if e is not None)
    times = ", ".join(f"M={m} {r['one_launch']['median_us']:.2f} / {r['two_launches']['median_us']:.2f}"
                      for m, r in rows)
    return (f"the same expert ids eager and from a CUDA graph at {same}/{len(rows)} token counts, {errs}; "
            f"weights rotated out of L2, median us one launch / the GEMV and the top-k: {times}")


def _hopper_layout_gemv(d: dict[str, Any]) -> str:
    """lab/scripts/gpu/hopper_layout_probe/check_gemv.py: each matrix's fastest (RB, K split) at each M,
    against the bytes' time and triton_kernels' matmul_ogs on the same swizzled weights."""
    cases = d.get("numerics") or []
    speed = d.get("speed") or {}
    mats = []
    for mat in ("gate_up", "down"):
        cells = ", ".join(
            f"M={r['M']} {min(r['us'].values()):.1f} ({r['fraction_of_bandwidth']:.2f}; {r['fastest']}"
            + (f"; matmul_ogs {r['matmul_ogs_us']:.1f}" if "matmul_ogs_us" in r else "") + ")"
            for r in speed.get("rows") or [] if r["mat"] == mat)
        if cells:
            mats.append(f"{mat}: {cells}")
    return (f"numbers within the bound in {sum(bool(c.get('ok')) for c in cases)}/{len(cases)} cases; "
            f"{speed.get('experts')} experts a launch, weights rotated out of L2, median us (fraction of "
            f"{float(speed.get('copy_bandwidth_gbs', 0)):.0f} GB/s; fastest RB and K split): "
            + "; ".join(mats))


def _hopper_layout_moe(d: dict[str, Any]) -> str:
    """lab/scripts/gpu/hopper_layout_probe/check_moe.py: one layer's fastest RB at each M against its bytes'
    time."""
    cases = d.get("numerics") or []
    speed = d.get("speed") or {}
    cells = ", ".join(f"M={r['M']} {min(r['us'].values()):.1f} / {r['bytes_us']:.1f} "
                      f"({r['fraction_of_bandwidth']:.2f}; {r['fastest']})" for r in speed.get("rows") or [])
    return (f"numbers within the bound in {sum(bool(c.get('ok')) for c in cases)}/{len(cases)} cases; "
            f"one layer (two launches), experts rotated out of L2, median us / the bytes' time at "
            f"{float(speed.get('copy_bandwidth_gbs', 0)):.0f} GB/s (fraction; fastest RB): {cells}")


SUMMARIZERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "mutations.json": _mutations,
    "upstream-tests.json": _upstream_tests,
    "linear_kernels.json": _linear_kernels,
    "decode_sinks_bench.json": _decode_sinks_bench,
    "lm_head_numerics.json": _lm_head_numerics,
    "mxfp4_quant_mask_patch.json": _quant_mask,
    "fa2_decode_sinks.json": _fa2_decode_sinks,
    "router_gemv_kernel.json": _router_gemv,
    "mxfp4_moe_gemv.json": _moe_gemv_numerics,
    "mxfp4_moe_mma.json": _moe_gemv_numerics,
    "moe_gemv_bench.json": _moe_gemv_bench,
    "moe_gemm_bench.json": _moe_gemm_bench,
    "mma_gemv_probe.json": _mma_gemv_probe,
    "router_topk_kernel.json": _router_topk,
    "hopper_layout_gemv.json": _hopper_layout_gemv,
    "hopper_layout_moe.json": _hopper_layout_moe,
}


def _last_error(log: Path) -> str | None:
    """A failed command's own last error line (pytest's `E ...`, a CLI's `error:`), shortened."""
    log = gzfile.existing(log)
    if not log.is_file():
        return None
    lines = [ln.strip() for ln in gzfile.read_text(log).splitlines()]
    found = [ln for ln in lines if ln.startswith("E ") or "error:" in ln.lower()]
    return found[-1][:200] if found else None


def computed(record: Path, failed: bool = False) -> str | None:
    """The line computed from the first known artifact of `record`, or None (no known artifact, or one
    that cannot be read: the report never fails on an old record's shape). A failed record without an
    artifact gets its command's last error line from output.log."""
    for name, summarize in SUMMARIZERS.items():
        path = gzfile.existing(record / name)
        if path.is_file():
            try:
                return summarize(json.loads(gzfile.read_text(path)))
            except (ValueError, KeyError, TypeError, AttributeError):
                return None
    return _last_error(record / "output.log") if failed else None
