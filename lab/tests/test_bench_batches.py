"""End-to-end time per batch from llama-benchy's progress events (bench.batches)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkserve_lab import gzfile
from sparkserve_lab.bench import batches, driver
from sparkserve_lab.bench.results import rows


def _start(rid: int, ts: float, c: int, run: int, pp: int = 2048) -> dict[str, object]:
    return {"type": "request_start", "ts": ts, "request_id": rid, "prompt_size": pp, "response_size": 128,
            "context_size": 0, "concurrency": c, "run_index": run}


def _end(rid: int, ts: float, tokens: int = 128, error: str = "") -> dict[str, object]:
    return {"type": "request_end", "ts": ts, "request_id": rid, "total_tokens": tokens, "error": error}


def test_a_batch_is_its_requests_from_the_first_start_to_the_last_end() -> None:
    events = [_start(1, 100.0, 2, 1), _start(2, 100.1, 2, 1), _end(2, 103.0), _end(1, 104.0),
              _start(3, 110.0, 2, 2), _start(4, 110.0, 2, 2), _end(3, 111.0), _end(4, 112.0, tokens=64)]
    got = batches.batches(events)
    assert [(b.run_index, b.requests, b.generated) for b in got] == [(1, 2, 256), (2, 2, 192)]
    assert got[0].wall_s == pytest.approx(4.0) and got[0].e2e_tps == pytest.approx(64.0)
    assert got[1].e2e_tps == pytest.approx(96.0)


def test_a_cut_off_batch_has_no_end_to_end_time_and_an_error_is_counted() -> None:
    events = [_start(1, 0.0, 2, 1), _start(2, 0.0, 2, 1), _end(1, 1.0),  # 2 never ended
              _start(3, 5.0, 2, 2), _start(4, 5.0, 2, 2), _end(3, 6.0), _end(4, 6.5, 0, "HTTP 500")]
    got = batches.batches(events)
    assert len(got) == 1 and got[0].errors == 1 and got[0].generated == 128
    data = batches.summary(got)
    # a batch with a failed request gives no end-to-end number to compare
    assert batches.e2e_values(data, (0, 2048, 128, 2)) == []


def test_the_driver_keeps_the_events_and_rows_carry_ttft_and_end_to_end(tmp_path: Path) -> None:
    events = [_start(1, 0.0, 1, 1), _end(1, 2.0), _start(2, 3.0, 1, 2), _end(2, 4.0)]
    plain = tmp_path / "progress.jsonl"
    plain.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"torn')
    gzfile.write_gzipped(plain, tmp_path / driver.PROGRESS)
    assert driver.PROGRESS.endswith(".gz") and (tmp_path / driver.PROGRESS).read_bytes()[:2] == b"\x1f\x8b"
    # a record made before the events were stored gzipped reads the same
    assert batches.read_events(plain) == batches.read_events(tmp_path / driver.PROGRESS)
    data = driver.write_batches(tmp_path)
    assert json.loads((tmp_path / driver.BATCHES).read_text()) == data
    bench = {"benchmarks": [{"context_size": 0, "prompt_size": 2048, "response_size": 128, "concurrency": 1,
                             "is_context_prefill_phase": False,
                             "tg_throughput": {"mean": 200.0, "values": [200.0, 200.0]},
                             "e2e_ttft": {"mean": 30.0, "values": [20.0, 40.0, 90.0]}}]}
    (row,) = rows(bench, data)
    assert row.ttft_median_ms == 40.0
    assert row.e2e_tps == pytest.approx((64.0 + 128.0) / 2)
    (old,) = rows(bench)  # a run measured before the events were kept
    assert old.e2e_tps is None and old.ttft_median_ms == 40.0
