"""The words docs/PROOFS.md prints after a verdict, computed from each record's artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.report import proof_summary
from sparkserve_lab.runstore import Store

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "lab" / "results" / "nvidia-h100-80gb-hbm3"
H200 = ROOT / "lab" / "results" / "nvidia-h200"


def _records() -> list[Path]:
    store = Store(ROOT / "lab" / "results")
    return [r.path for hw in store.hardware() for r in store.proofs(hw) + store.measurements(hw)]


def test_every_stored_record_with_a_known_artifact_gets_its_line() -> None:
    """A reader that stops matching an artifact's shape would silently fall back to stored words."""
    known = [p for p in _records() if any((p / name).is_file() for name in proof_summary.SUMMARIZERS)]
    assert len(known) >= 20
    unread = [p.name for p in known if proof_summary.computed(p) is None]
    assert unread == []


@pytest.mark.parametrize(("record", "words"), [
    ("20261127T000704Z-linear-kernels-l2-cold-a460",
     "qkv BF16 12.8 / Marlin 13.2 / Humming 11.7; o BF16 14.0 / Marlin 11.5 / Humming 11.1"),
    ("20261127T002204Z-upstream-tests-vllm-gpu-c3d8",
     "vllm: 87 tests of 6 files, unpatched then patched: 0 changed outcome(s), 6 failing in both"),
    ("20261127T000905Z-mutate-vllm-0001-235e", "1 hunk(s) reverted one at a time: 1 caught, 0 survived"),
    ("20261127T000832Z-vllm-0001-quant-mask-bit-identical-a8de",
     "36/36 cases bit-identical to the unpatched kernel; deprecation warnings: unpatched 1, patched 0"),
    ("20261127T002648Z-lm-head-numerics-cb40", "max rel err 0.00181 against the dequantized reference"),
    ("20261127T002542Z-decode-sinks-kernel-bench-3325", "XQA 9.06, fa2 CUDA-core 10.56"),
    ("20261125T085110Z-fa2-decode-sinks-numerics-0856", "38 shapes against a float32 reference: max rel err "
                                                        "bf16 0.006, fp8 KV 0.0037"),
    ("20261206T040633Z-router-topk-kernel-1c91", "the same expert ids eager and from a CUDA graph at 8/8 "
                                                 "token counts"),
    ("20261206T040633Z-router-topk-kernel-1c91", "M=1 4.35 / 5.95"),
    ("20261206T041456Z-hopper-layout-gemv-probe-1b29", "numbers within the bound in 92/92 cases"),
    ("20261206T041456Z-hopper-layout-gemv-probe-1b29",
     "gate_up: M=1 16.8 (0.69; rb2_split1; matmul_ogs 23.6)"),
])
def test_the_line_states_what_the_artifact_holds(record: str, words: str) -> None:
    line = proof_summary.computed(H100 / record)
    assert line is not None and words in line


@pytest.mark.parametrize(("record", "words"), [
    ("20261202T051439Z-moe-gemv-bench-2fb1", "M=1 91.4 / 52.1 / 12.4 (0.14 of the bandwidth)"),
    ("20261202T082829Z-moe-gemv-bench-31c7", "M=1 36.5 / 51.9 / 12.3 (0.34 of the bandwidth)"),
    ("20261202T082829Z-moe-gemv-bench-31c7", "the sweep's fastest: M=1 33.0 (4/4 K splits, 16 tiles a step)"),
    ("20261203T215405Z-moe-gemv-bench-d393", "M=1 40.6 / 52.1 / 12.3 (0.30 of the bandwidth)"),
    ("20261203T215405Z-moe-gemv-bench-d393", "without the L2 prefetch: M=1 36.9, M=2 56.2"),
    ("20261203T215405Z-moe-gemv-bench-d393", "without the L2 prefetch and the dependent launch: M=1 35.1"),
    ("20261202T051324Z-moe-gemv-kernels-9484", "8/8 batch sizes within the bound"),
    ("20261202T052717Z-router-gemv-kernel-fe79", "M=1 2.75 / 7.14"),
])
def test_the_decode_kernels_lines_state_their_times_and_bounds(record: str, words: str) -> None:
    line = proof_summary.computed(H200 / record)
    assert line is not None and words in line


def test_a_paced_upstream_run_says_how_many_files_it_compared_and_left_out() -> None:
    line = proof_summary.computed(ROOT / "lab" / "results" / "nvidia-h200-x4" /
                                  "20261128T173412Z-upstream-tests-vllm-gpu-4f68")
    assert line is not None
    assert "71 tests of 9 of 85 selected files" in line and "76 files left out, each with why" in line


def test_files_compared_in_part_are_counted_among_the_compared(tmp_path: Path) -> None:
    (tmp_path / "upstream-tests.json").write_text(json.dumps({"vllm": {
        "selected": {"vllm/a.py": ["tests/t1.py", "tests/t2.py", "tests/t3.py"]}, "tests": 40, "flips": [],
        "environmental": [], "partial": {"tests/t2.py": "unpatched: over the per-file limit of 120 s"},
        "left_out": {"tests/t3.py": "unpatched: not reached before the state's deadline"}}}))
    line = proof_summary.computed(tmp_path)
    assert line is not None and "40 tests of 2 of 3 selected files" in line
    assert "0 changed outcome(s)," in line
    assert "1 of those files stopped at the per-file limit" in line and "1 files left out" in line


def test_changed_outcomes_say_how_many_the_series_carries(tmp_path: Path) -> None:
    flips = [{"test": "a", "carried": "yes"}, {"test": "b", "carried": "yes"}, {"test": "c", "carried": ""}]
    (tmp_path / "upstream-tests.json").write_text(json.dumps({"vllm": {
        "selected": {"vllm/a.py": ["tests/t1.py"]}, "tests": 9, "flips": flips, "environmental": []}}))
    line = proof_summary.computed(tmp_path)
    assert line is not None and "3 changed outcome(s) (2 carried by the series, 1 not)" in line


def test_a_failed_record_without_an_artifact_shows_its_last_error_and_a_passed_one_nothing() -> None:
    failed = H100 / "20261127T001821Z-upstream-tests-vllm-gpu-73f0"
    assert proof_summary.computed(failed, failed=True) == "E   ModuleNotFoundError: No module named 'tblib'"
    assert proof_summary.computed(failed) is None


def test_mutation_counts_include_every_status_and_a_failing_bench_its_errors(tmp_path: Path) -> None:
    (tmp_path / "mutations.json").write_text(json.dumps({"hunks": [
        {"status": "caught"}, {"status": "survived"}, {"status": "docs only"}, {"status": "caught"}]}))
    assert proof_summary.computed(tmp_path) == ("4 hunk(s) reverted one at a time: 2 caught, 1 survived, "
                                                "1 docs only")
    (tmp_path / "mutations.json").unlink()
    (tmp_path / "linear_kernels.json").write_text(json.dumps({"layers": [
        {"layer": "qkv", "rows": [{"m": 1, "bf16": {"median_us": 9.0}}],
         "errors": {"HummingMxFp4LinearKernel": "kernels disagree"}}]}))
    assert proof_summary.computed(tmp_path) == ("M=1, weights rotated out of L2, median us: qkv BF16 9.0; "
                                                "errors: qkv Humming: kernels disagree")
    (tmp_path / "linear_kernels.json").write_text("{not json")
    assert proof_summary.computed(tmp_path) is None


def test_a_bench_whose_tokens_share_their_experts_says_so(tmp_path: Path) -> None:
    row = {"m": 2, "kernel_kw": {}, "gemv": {"median_us": 40.0}, "marlin": {"median_us": 30.0},
           "byte_time_us": 12.0, "gemv_fraction_of_bandwidth": 0.3}
    (tmp_path / "moe_gemv_bench.json").write_text(json.dumps({"copy_bandwidth_gb_s": 4300, "rows": [
        {**row, "routing": "shared"}]}))
    line = proof_summary.computed(tmp_path)
    assert line is not None
    assert line.startswith("one layer, experts rotated out of L2, the tokens of a call on the same 4 "
                           "experts, median us")
    (tmp_path / "moe_gemv_bench.json").write_text(json.dumps({"copy_bandwidth_gb_s": 4300, "rows": [
        {**row, "routing": "distinct"}]}))
    assert proof_summary.computed(tmp_path) == (
        "one layer, experts rotated out of L2, median us kernels / Marlin / the bytes' time at 4300 GB/s: "
        "M=2 40.0 / 30.0 / 12.0 (0.30 of the bandwidth)")


def test_the_grouped_gemm_bench_names_the_fastest_tile_shape_at_each_size(tmp_path: Path) -> None:
    def row(m: int, bm: int, us: float, agrees: bool = True) -> dict[str, Any]:
        config = {"block_m": bm, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3}
        return {"m": m, "config": config,
                "gemm": {"median_us": us}, "marlin": {"median_us": 100.0}, "speedup": 100.0 / us,
                "gemm_tflops": 50.0 / us, "marlin_tflops": 0.5, "agrees": agrees}
    (tmp_path / "moe_gemm_bench.json").write_text(json.dumps({"rows": [
        row(64, 64, 400.0), row(64, 128, 200.0), row(8192, 128, 80.0, agrees=False),
        {"m": 8192, "config": [128, 256, 64, 8, 3], "error": "OutOfResources", "agrees": True}]}))
    assert proof_summary.computed(tmp_path) == (
        "one layer, median us of the grouped GEMMs at their fastest tile shape / Marlin: "
        "M=64 200 / 100 (0.50x; 128x128x64, 8 warps), M=8192 80 / 100 (1.25x; 128x128x64, 8 warps); "
        "at M=8192 1 against 0 TFLOP/s; within the bound with padded rows zero in 2/3 runs")


def test_the_tensor_core_probe_states_each_matrix_at_its_unpadded_k_and_fastest_split(tmp_path: Path) -> None:
    def row(mat: str, n: int, k_tiles: int, m: int, split: int, us: float) -> dict[str, Any]:
        return {"mat": mat, "N": n, "k_tiles": k_tiles, "M": m, "split_k": split, "us": us,
                "of_copy_bw": 1.0 / us}
    (tmp_path / "mma_gemv_probe.json").write_text(json.dumps({
        "copy_bw_GBps": 4200.0, "ok": True,
        "timing": [row("gate_up", 11776, 192, 1, 1, 2.0),  # Marlin's padded K: not the one stated
                   row("gate_up", 11776, 180, 1, 1, 8.0), row("gate_up", 11776, 180, 1, 2, 4.0),
                   row("down", 6144, 184, 1, 4, 5.0)],
        "cases": [{"rel": 1e-6, "ok": True}], "checks": [{"rel": 2e-6, "ok": False}]}))
    assert proof_summary.computed(tmp_path) == (
        "tensor-core GEMV, one launch a matrix of 2 expert(s)' columns (the M tokens on all of it), weights "
        "rotated out of L2, median us (fraction of 4200 GB/s; fastest K split): gate_up 11776 x 2880: "
        "M=1 4.0 (0.25; split 2); down 6144 x 2944: M=1 5.0 (0.20; split 4); numbers within the bound in "
        "1/2 cases, largest error 2.0e-06 of the largest output")


def test_the_hopper_layout_moe_probe_states_each_m_at_its_fastest_row_block(tmp_path: Path) -> None:
    (tmp_path / "hopper_layout_moe.json").write_text(json.dumps({
        "numerics": [{"M": 1, "RB": 2, "ok": True}, {"M": 8, "RB": 2, "ok": False}],
        "speed": {"copy_bandwidth_gbs": 3028, "rows": [
            {"M": 1, "bytes_us": 17.5, "us": {"rb1": 30.0, "rb2": 25.0}, "fastest": "rb2",
             "fraction_of_bandwidth": 0.7}]}}))
    line = proof_summary.computed(tmp_path)
    assert line is not None
    assert "numbers within the bound in 1/2 cases" in line
    assert "M=1 25.0 / 17.5 (0.70; rb2)" in line and "3028 GB/s" in line
