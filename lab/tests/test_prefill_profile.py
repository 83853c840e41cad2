"""The prefill-chunk breakdown (`sparkserve-lab trace prefill`): which steps are full chunks and what they
cost per class and per token, the prompts it sends, and the verb against a stand-in server whose profiler
writes a synthetic trace."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkserve_lab.report import prefill as prefill_report
from sparkserve_lab.runstore import Store, read_json
from sparkserve_lab.trace import capture, classify, prefill, record, steps, trace

from sparkserve.errors import SparkserveError

ROOT = Path(__file__).resolve().parents[2]
RULES = classify.load(ROOT / classify.DEFAULT_FILE)


def _trace(shapes: list[tuple[int, int, int, int]], kernels: list[tuple[str, float]]) -> dict[str, Any]:
    """One step per (context requests, context tokens, generation requests, generation tokens), 1 ms apart,
    each launching `kernels` (name, us), their durations scaled by the step's tokens over 1,024."""
    events: list[dict[str, Any]] = []
    corr = 0
    for i, (cr, ct, gr, gt) in enumerate(shapes):
        t0 = 1000.0 * i
        events.append({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t0, "dur": 100.0,
                       "name": f"execute_context_{cr}({ct})_generation_{gr}({gt})"})
        at = t0 + 100.0
        for j, (name, us) in enumerate(kernels):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0 + 1 + j,
                           "dur": 1.0, "args": {"correlation": corr}})
            dur = us * (ct + gt) / 1024
            events.append({"ph": "X", "cat": "kernel", "name": name, "ts": at, "dur": dur,
                           "args": {"correlation": corr}})
            at += dur
    return {"traceEvents": events}


KERNELS = [("flash_fwd_splitkv_kernel", 100.0), ("fused_moe_kernel", 300.0), ("fused_moe_kernel", 200.0)]
# two full chunks of 2,048 tokens (one with 2 decode tokens), the last piece of a prompt, decode steps
SHAPES = [(2, 2048, 0, 0), (1, 2046, 2, 2), (1, 512, 3, 3), (0, 0, 4, 4), (0, 0, 4, 4)]


def _steps(tmp: Path, shapes: list[tuple[int, int, int, int]]) -> list[steps.Step]:
    path = tmp / "t.json"
    path.write_text(json.dumps(_trace(shapes, KERNELS)))
    return steps.split(trace.load(path), RULES)


def test_a_full_chunk_is_the_largest_prefill_step_and_costs_per_class_and_token(tmp_path: Path) -> None:
    st = _steps(tmp_path, SHAPES)
    assert [(s.ctx_tokens, s.gen_tokens) for s in prefill.full_chunks(st)] == [(2048, 0), (2046, 2)]
    s = prefill.summarize(st, 32)
    assert (s["prefill_steps"], s["full_chunks"], s["chunk_tokens"]) == (3, 2, 2048)
    assert s["chunk_decode_tokens"] == 1
    assert s["class_us"]["attention"] == 200.0
    assert s["class_us"]["moe-gemm1"] + s["class_us"]["moe-gemm2"] == 1000.0
    assert s["class_ns_per_token"]["attention"] == round(200.0 * 1000 / 2048, 2)
    assert s["step_period_us"] == 1000.0 and s["tokens_per_s_from_period"] == 2048000.0
    assert s["kernels_per_step"] == 3
    rows = prefill.kernel_table(st)
    assert rows[0] == {"name": "fused_moe_kernel", "class": "moe-gemm1", "per_chunk": 1.0,
                       "us_per_chunk": 600.0}
    assert prefill.median_chunk(st).ctx_tokens in (2048, 2046)


def test_a_trace_without_a_prefill_step_is_refused(tmp_path: Path) -> None:
    st = _steps(tmp_path, [(0, 0, 4, 4), (0, 0, 4, 4)])
    with pytest.raises(SparkserveError, match=r"no prefill step in the trace .*\(0, 4\)"):
        prefill.summarize(st, 32)


def test_prompts_differ_from_their_first_block_between_requests_and_captures() -> None:
    a, b = capture.PromptLoad(4, 4, 2048, salt=7), capture.PromptLoad(4, 4, 2048, salt=8)
    prompts = [x.body("m", i)["prompt"] for x in (a, b) for i in range(4)]
    assert all(isinstance(p, list) and len(p) == 2048 for p in prompts)
    assert len({tuple(p[:16]) for p in prompts}) == 8  # no shared prefix-cache block
    assert all(capture.FIRST_ID <= t < capture.FIRST_ID + capture.ID_SPAN for p in prompts for t in p)
    assert a.body("m", 3) == a.body("m", 3)
    body = a.body("m", 0)
    assert body["min_tokens"] == body["max_tokens"] == 4 and body["ignore_eos"]


def test_a_classes_file_whose_annotation_lacks_the_prompt_tokens_is_refused(tmp_path: Path) -> None:
    text = (ROOT / classify.DEFAULT_FILE).read_text().replace("(?P<ctx_tokens>\\d+)", "\\d+")
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(SparkserveError, match="no named group ctx_tokens"):
        classify.load(tmp_path / "c.toml")


@pytest.fixture
def profiled_server(tmp_path: Path) -> Iterator[tuple[str, Path, list[dict[str, Any]]]]:
    """A stand-in vLLM: ready, serves completions, and writes a synthetic worker trace on /stop_profile."""
    traces = tmp_path / "traces"
    traces.mkdir()
    sent: list[dict[str, Any]] = []
    profiling: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _json(self, data: object) -> None:
            raw = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            self._json({"data": [{"id": "openai/gpt-oss-120b"}]} if self.path == "/v1/models" else {})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            if self.path == "/v1/completions":
                if profiling:
                    sent.append(body)
                self._json({"usage": {"completion_tokens": body["max_tokens"]}})
                return
            if self.path == "/start_profile":
                profiling.append(1)
            elif self.path == "/stop_profile":
                profiling.clear()
                n = len(list(traces.glob("*.json")))
                (traces / f"worker-{n}.pt.trace.json").write_text(json.dumps(_trace(SHAPES, KERNELS)))
            self._json({})

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", traces, sent
    srv.shutdown()


def test_the_verb_records_each_concurrency(profiled_server: tuple[str, Path, list[dict[str, Any]]],
                                           tmp_path: Path) -> None:
    from sparkserve_lab.cli.main import main

    url, traces, sent = profiled_server
    store = tmp_path / "store"
    assert main(["trace", "prefill", "--base-url", url, "--trace-dir", str(traces), "--configuration",
                 "hopper-h100", "--concurrency", "3,5", "--prompt-tokens", "64", "--store", str(store),
                 "--hardware", "test-gpu"]) == 0
    assert len(sent) == 8 and all(len(b["prompt"]) == 64 for b in sent)
    (rec,) = [r for r in Store(store).records("test-gpu") if r.kind == record.PREFILL_KIND]
    data = read_json(rec.file(record.PREFILL_SUMMARY))
    assert sorted(data["concurrency"]) == ["3", "5"]
    assert data["concurrency"]["5"]["chunk_tokens"] == 2048 and data["load"]["prompt_tokens"] == 64
    assert data["concurrency"]["3"]["trace"]["raw_trace"] == "trace-c3.json.gz"
    assert read_json(rec.file("kernels-c5.json"))[0]["name"] == "fused_moe_kernel"
    assert read_json(rec.file("step-c3.json"))[0]["name"] == "flash_fwd_splitkv_kernel"
    assert rec.metadata()["verdict"] == "pass"
    text = "\n".join(prefill_report.section(Store(store), tmp_path / "docs" / "B.md"))
    assert f"- hopper-h100: [`{rec.run_id}`](../store/test-gpu/{rec.run_id})" in text
    assert "| us per full chunk (ns a token) | hopper-h100 c3 | hopper-h100 c5 |" in text
    assert "| attention | 200.0 (97.7) | 200.0 (97.7) |" in text
    assert "| chunk tokens (decode among them) | 2048 (1.0) | 2048 (1.0) |" in text
    assert "| full chunks / prefill steps | 2 / 3 | 2 / 3 |" in text
    assert "activation" not in text  # a class no chunk spent time in has no row


def test_the_report_says_when_there_is_no_prefill_record(tmp_path: Path) -> None:
    assert prefill_report.section(Store(tmp_path), tmp_path / "B.md")[-2] == "None in the store."
