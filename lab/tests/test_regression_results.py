"""Level 5 comparisons and llama-benchy result handling (pure functions: no server)."""

from __future__ import annotations

import pytest
from sparkserve_lab.bench import presets
from sparkserve_lab.bench.results import require_results, rows
from sparkserve_lab.levels import regression
from test_runstore_report import bench_json

from sparkserve.errors import SparkserveError

GB = regression.GB


def meta(mem: int) -> dict[str, object]:
    return {"memory": {"gpu_memory_used_bytes": mem, "server_rss_bytes": None}}


def test_a_5_percent_decode_drop_fails() -> None:
    res = regression.compare(bench_json(60.0), bench_json(57.0), meta(GB), meta(GB))
    assert not res.ok
    assert any(c.ok is False and c.name.startswith("decode") for c in res.checks)


def test_a_1_percent_drop_passes() -> None:
    res = regression.compare(bench_json(60.0), bench_json(59.4), meta(GB), meta(GB))
    assert res.ok


def test_prefill_drop_fails_too() -> None:
    res = regression.compare(bench_json(60.0, pp=4000), bench_json(60.0, pp=3800), meta(GB), meta(GB))
    assert not res.ok


def test_memory_growth_over_1_gb_fails() -> None:
    assert not regression.compare(bench_json(60.0), bench_json(60.0), meta(GB), meta(int(2.5 * GB))).ok
    assert regression.compare(bench_json(60.0), bench_json(60.0), meta(GB), meta(int(1.5 * GB))).ok


def test_disjoint_tests_fail() -> None:
    assert not regression.compare(
        bench_json(60.0, depths=(0,)), bench_json(60.0, depths=(4096,)), meta(GB), meta(GB)
    ).ok


def test_the_3_percent_boundary() -> None:
    """A drop of exactly 3% is within the default; anything more fails."""
    assert regression.compare(bench_json(100.0), bench_json(97.0), meta(GB), meta(GB)).ok
    assert not regression.compare(bench_json(100.0), bench_json(96.99), meta(GB), meta(GB)).ok
    assert regression.compare(bench_json(60.0, pp=4000.0), bench_json(60.0, pp=3880.0), meta(GB), meta(GB)).ok
    assert not regression.compare(bench_json(60.0, pp=4000.0), bench_json(60.0, pp=3879.0), meta(GB),
                                  meta(GB)).ok


def test_the_cli_default_is_the_3_percent_of_the_product() -> None:
    from sparkserve_lab.cli.main import build_parser

    args = build_parser().parse_args(["level", "5", "--run", "x"])
    assert args.max_drop == 0.03
    assert regression.compare.__defaults__ is not None and 0.03 in regression.compare.__defaults__


def test_one_slow_request_does_not_fail_the_median() -> None:
    """The live comparison on a shared CPU: one request of three at half speed leaves the median, which
    level 5 compares, where it was (the mean would drop by a sixth)."""
    base = bench_json(60.0)
    cand = bench_json(60.0)
    tg = cand["benchmarks"][0]["tg_throughput"]  # type: ignore[index]
    tg["values"] = [60.0, 30.0, 60.0]
    tg["mean"] = 50.0
    assert regression.compare(base, cand, meta(GB), meta(GB)).ok
    tg["values"] = [30.0, 30.0, 60.0]  # most requests slow: a real regression
    assert not regression.compare(base, cand, meta(GB), meta(GB)).ok


def test_tolerance_is_a_parameter() -> None:
    assert regression.compare(bench_json(60.0), bench_json(57.0), meta(GB), meta(GB), max_drop=0.10).ok


def test_empty_llama_benchy_result_is_a_failure() -> None:
    with pytest.raises(SparkserveError, match="no results"):
        require_results({"benchmarks": []}, "x.json")
    with pytest.raises(SparkserveError, match="no result file"):
        require_results(None, "x.json")
    failed = {
        "benchmarks": [
            {
                "concurrency": 1,
                "context_size": 0,
                "prompt_size": 2048,
                "response_size": 32,
                "is_context_prefill_phase": False,
                "pp_throughput": None,
                "tg_throughput": None,
            }
        ]
    }
    with pytest.raises(SparkserveError, match="no results"):
        require_results(failed, "x.json")
    assert len(require_results(bench_json(60.0), "x.json")) == 1


def test_context_phase_rows_are_left_out() -> None:
    data = bench_json(60.0, depths=(0, 4096))
    ctx = dict(data["benchmarks"][1])  # type: ignore[index]
    ctx["is_context_prefill_phase"] = True
    data["benchmarks"].append(ctx)  # type: ignore[attr-defined]
    assert [r.depth for r in rows(data)] == [0, 4096]


def test_presets() -> None:
    arena = presets.get("spark-arena")
    assert arena.depth == (0, 4096, 8192, 16384, 32768, 65535, 100000)
    assert arena.concurrency == (1, 2, 5, 10) and arena.prefix_caching and arena.tg == (128,)
    quick = presets.get("quick")
    assert (quick.pp, quick.tg, quick.runs) == ((2048,), (32,), 3)
    assert presets.get("decode-depth").depth[-1] == 32768
    assert quick.expected_requests() == 3
    assert quick.with_overrides(pp=[256], depth=[0, 1024]).expected_requests() == 6
    with pytest.raises(SparkserveError):
        presets.get("nope")


def test_a_missing_candidate_value_fails() -> None:
    """The baseline measured decode for a test the run also has, but the run kept no decode value."""
    base, cand = bench_json(60.0), bench_json(60.0)
    del cand["benchmarks"][0]["tg_throughput"]  # type: ignore[index]
    res = regression.compare(base, cand, meta(GB), meta(GB))
    assert not res.ok
    assert any(c.ok is False and "no value in the run" in c.detail for c in res.checks)
    # the other way round there is nothing to hold the run to: not a failure
    assert regression.compare(cand, base, meta(GB), meta(GB)).ok
