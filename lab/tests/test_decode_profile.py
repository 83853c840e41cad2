"""The decode-step breakdown (`sparkserve profile decode`) on stored excerpts of real H100 traces: kernel
classes, step metrics, the refusals, the record's trace handling and the GB10 estimate."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sparkserve_lab.bench.presets import get
from sparkserve_lab.runstore import read_json
from sparkserve_lab.trace import capture, classify, estimate, record, steps, trace

from sparkserve.errors import SparkserveError
from sparkserve.gate.common import Client

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "decode-profile"
RULES = classify.load(ROOT / classify.DEFAULT_FILE)


def _steps(name: str) -> list[steps.Step]:
    return steps.split(trace.load(DATA / name), RULES)


def _decode(name: str, batch: int) -> list[steps.Step]:
    return [s for s in _steps(name) if s.is_decode and s.gen_reqs == batch]


def _classes(step: steps.Step) -> dict[str, str]:
    return {e.name: c for e, c in zip(step.events, step.classes, strict=True)}


def test_hopper_step_has_every_layer_class_36_times() -> None:
    step = _decode("hopper-h100-b1-steps.json.gz", 1)[0]
    n = Counter(step.classes)
    assert n["moe-gemm1"] == n["moe-gemm2"] == 36
    assert n["attention"] == 4 * 36  # cache write, split scheduler, FA3, combine
    assert n["qkv-o-gemm"] == 4 * 36  # QKV and O, each with Humming's input quantization
    assert n["lm-head"] == 1
    assert n["router-topk"] == 7 * 36  # router GEMM + split-K tail, 4 routing kernels, the experts' combine


def test_gemms_are_placed_by_position() -> None:
    hopper = _classes(_decode("hopper-h100-b1-steps.json.gz", 1)[0])
    stock = _classes(_decode("vllm-defaults-b1-steps.json.gz", 1)[0])
    by = {c: [n for n, k in hopper.items() if k == c] for c in set(hopper.values())}
    assert any("201216u" in n for n in by["lm-head"])  # the vocabulary-wide Humming GEMM
    assert any("5120u" in n for n in by["qkv-o-gemm"]) and any("3072u" in n for n in by["qkv-o-gemm"])
    assert any(n.startswith("nvjet") for n in by["router-topk"])  # the BF16 router
    assert any("splitKreduce" in n for n in by["router-topk"])
    assert all("process_input_kernel" not in n for c, ns in by.items() if c != "qkv-o-gemm" for n in ns)
    assert stock["nvjet_sm90_tst_512x8_64x3_2x1_v_bz_TNT"] == "lm-head"
    assert stock["nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_bias_TNT"] == "router-topk"
    assert stock["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_bias_TNT"] == "qkv-o-gemm"
    assert Counter(_decode("vllm-defaults-b1-steps.json.gz", 1)[0].classes)["qkv-o-gemm"] == 3 * 36


def test_a_classes_file_with_a_bad_resolver_is_refused(tmp_path: Path) -> None:
    text = (ROOT / classify.DEFAULT_FILE).read_text().replace('resolve = "previous"', 'resolve = "position"')
    bad = tmp_path / "classes.toml"
    bad.write_text(text)
    with pytest.raises(SparkserveError, match="resolve"):
        classify.load(bad)


def test_the_decode_moe_kernels_are_the_two_moe_gemms_not_an_activation() -> None:
    """vllm/0007's kernels (MOE_BACKEND=marlin-gemv) carry the SwiGLU and the combine in their names; they are
    the layer's two MoE GEMMs, and the routing kernels and router GEMV around them keep their classes."""
    layer = ["flash_fwd_splitkv_kernel", "_bias_router_gemv_kernel", "topkGatingSoftmax",
             "_gate_up_swiglu_kernel", "_down_combine_kernel", "fused_add_rms_norm_kernel"]
    assert classify.classify_sequence(layer, RULES) == [
        "attention", "router-topk", "router-topk", "moe-gemm1", "moe-gemm2", "norms-rope-residual"]


def test_a_router_that_computes_its_gate_leaves_every_gemm_before_it_to_o() -> None:
    """vllm/0010's one-launch routing (VLLM_ROUTER_GEMV_TOPK=1) has no router GEMM before it: the O projection
    (Humming's activation quantization and GEMM) stays qkv-o-gemm. With vllm/0006's GEMV and a separate top-k
    the last GEMM before the top-k is the router's."""
    o_proj = ["flash_fwd_splitkv_kernel", "process_input_kernel<Config>",
              "humming<MmaOpClass, Shape<0u, 3072u>>"]
    fused = classify.classify_sequence([*o_proj, "_bias_router_topk_kernel", "_gate_up_swiglu_kernel"], RULES)
    assert fused == ["attention", "qkv-o-gemm", "qkv-o-gemm", "router-topk", "moe-gemm1"]
    split = classify.classify_sequence(
        [*o_proj, "_bias_router_gemv_kernel", "topkGatingSoftmax", "_gate_up_swiglu_kernel"], RULES)
    assert split == ["attention", "qkv-o-gemm", "qkv-o-gemm", "router-topk", "router-topk", "moe-gemm1"]


def test_includes_gate_is_for_the_routing_class_only(tmp_path: Path) -> None:
    text = (ROOT / classify.DEFAULT_FILE).read_text().replace(
        'name = "router-topk"\n# vllm/0010', 'name = "attention"\n# vllm/0010', 1)
    bad = tmp_path / "classes.toml"
    bad.write_text(text)
    with pytest.raises(SparkserveError, match="includes_gate"):
        classify.load(bad)


def test_unknown_names_are_other() -> None:
    assert classify.classify_sequence(["some_new_kernel"], RULES) == ["other"]


def test_summary_of_batch_32() -> None:
    s = steps.summarize(_steps("hopper-h100-b32-steps.json.gz"), 32)
    assert s["decode_steps"] == 3
    assert s["graph_launches_per_step"] == 1.0
    assert s["kernels_per_step"] > 700
    total = sum(s["class_us"].values())
    assert total == pytest.approx(s["gpu_kernel_time_us"], rel=1e-3)
    assert s["class_us"]["moe-gemm1"] > s["class_us"]["attention"]  # batch 32 reads many experts
    assert s["gpu_busy_us"] <= s["gpu_kernel_time_us"] + 1e-6
    assert s["step_period_us"]["median"] >= s["gpu_busy_us"] * 0.9
    with pytest.raises(SparkserveError, match="no decode step at batch 8"):
        steps.summarize(_steps("hopper-h100-b32-steps.json.gz"), 8)


def test_graphs_off_is_refused_when_the_profile_says_on() -> None:
    decode = _decode("vllm-defaults-b1-steps.json.gz", 1)
    capture.require_graphs(decode, True)
    with pytest.raises(SparkserveError, match="replayed a CUDA graph"):
        capture.require_graphs(decode, False)
    for s in decode:
        s.graph_launches, s.kernel_launches = 0, 700
    with pytest.raises(SparkserveError, match="CUDA graphs are off"):
        capture.require_graphs(decode, True)


def test_a_trace_without_step_annotations_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]}))
    with pytest.raises(SparkserveError, match="no step annotations"):
        steps.split(trace.load(p), RULES)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_that_does_not_answer_is_not_ready() -> None:
    with pytest.raises(SparkserveError, match="server not ready"):
        capture.require_ready(Client(f"http://127.0.0.1:{_free_port()}", timeout=2))


@pytest.fixture
def loading_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_a_server_still_loading_is_not_ready(loading_server: str) -> None:
    with pytest.raises(SparkserveError, match=r"server not ready.*503"):
        capture.require_ready(Client(loading_server, timeout=5))


def test_every_request_has_its_own_prompt_and_seed() -> None:
    load = capture.Load(batch=32, tokens=64)
    bodies = [load.body("m", i) for i in range(32)]
    assert len({str(b["prompt"]) for b in bodies}) == 32
    assert len({b["seed"] for b in bodies}) == 32
    assert all(b["min_tokens"] == b["max_tokens"] == 64 and b["ignore_eos"] for b in bodies)


def test_a_large_trace_is_summarized_and_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = DATA / "hopper-h100-b1-steps.json.gz"
    kept = record.keep_trace(src, tmp_path, 1)
    assert kept["raw_trace"] == "trace-b1.json.gz" and (tmp_path / "trace-b1.json.gz").exists()
    monkeypatch.setattr(record, "RAW_TRACE_LIMIT", 1000)
    left = record.keep_trace(src, tmp_path / "none", 32)
    assert left["raw_trace"] is None and "left out" in left["note"]


def test_concurrency_preset() -> None:
    p = get("concurrency")
    assert p.concurrency == (1, 2, 4, 5, 8, 10, 16, 32, 64)
    assert (p.pp, p.tg, p.depth) == ((512,), (128,), (0,))


def test_bytes_per_class_agree_with_the_published_budget() -> None:
    m = estimate.load(ROOT / estimate.DEFAULT_FILE).model
    b = estimate.class_bytes(m, 1, 0, {"moe", "qkv", "o", "lm_head"}, 2.0)
    assert b["moe-gemm1"] + b["moe-gemm2"] == pytest.approx(1.90e9, rel=0.01)  # 3.58 B params x 4.25 bit
    assert b["lm-head"] == pytest.approx(0.31e9, rel=0.02)
    bf16 = estimate.class_bytes(m, 1, 0, {"moe"}, 2.0)
    assert bf16["qkv-o-gemm"] == pytest.approx(1.91e9, rel=0.01)
    assert bf16["lm-head"] == pytest.approx(1.16e9, rel=0.01)
    assert estimate.experts_hit(1, 128, 4) == pytest.approx(4.0)
    assert 4 < estimate.experts_hit(32, 128, 4) < 128


def test_estimate_adds_the_non_byte_time_once() -> None:
    inputs = estimate.load(ROOT / estimate.DEFAULT_FILE)
    bytes_only = estimate.estimate(inputs, {}, 1, 0, {"moe", "qkv", "o", "lm_head"}, 1.0, 250.0)
    layers = {"moe", "qkv", "o", "lm_head"}
    slow = estimate.estimate(inputs, {"moe-gemm1": 10_000.0}, 1, 0, layers, 1.0, 250.0)
    moe1 = slow["classes"]["moe-gemm1"]
    assert moe1["gb10_us"] == pytest.approx(bytes_only["classes"]["moe-gemm1"]["gb10_us"]
                                            + 10_000.0 - moe1["byte_us_measured_gpu"], abs=0.2)
    assert bytes_only["step_us"] == pytest.approx(bytes_only["bytes_total"] / 250e3, rel=1e-3)


def test_summarize_verb_prints_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkserve_lab.cli.main import main

    assert main(["--json", "trace", "summarize", str(DATA / "vllm-defaults-b32-steps.json.gz"), "--batch",
                 "32"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batch"] == 32 and out["class_us"]["lm-head"] > 0


def test_reclassify_redoes_a_record_from_its_raw_trace(tmp_path: Path) -> None:
    import shutil

    from sparkserve_lab.cli.main import main

    rec = tmp_path / "results" / "nvidia-h100-80gb-hbm3" / "20261126T000000Z-decode-profile-x-0000"
    rec.mkdir(parents=True)
    shutil.copyfile(DATA / "hopper-h100-b1-steps.json.gz", rec / "trace-b1.json.gz")
    (rec / "metadata.json").write_text(json.dumps({"kind": record.KIND, "configuration": "x"}))
    (rec / record.SUMMARY).write_text(json.dumps({"classes_sha256": "old", "batches": {
        "1": {"class_us": {"other": 1.0}, "trace": {"raw_trace": "trace-b1.json.gz"}}}}))
    assert main(["trace", "reclassify", str(rec), "--store", str(tmp_path / "results")]) == 0
    data = record.summary(rec)
    assert data["classes_sha256"] == RULES.sha256
    assert data["reclassified"][0]["before"]["classes_sha256"] == "old"
    assert data["batches"]["1"]["class_us"]["lm-head"] > 0
    # the step's excerpt (over gzfile.COMPACT_BYTES) is kept gzipped and read by its plain name
    assert (rec / "step-b1.json.gz").is_file() and not (rec / "step-b1.json").exists()
    assert read_json(rec / "step-b1.json")[0]["class"]


def _kept_record(tmp_path: Path, step_names: list[tuple[str, str]]) -> Path:
    """A decode-profile record whose raw trace was left out: its summary, kernel table and median step as
    an older classifier wrote them (each kernel 10 us, once a step)."""
    rec = tmp_path / "results" / "nvidia-h100-80gb-hbm3" / "20261206T000000Z-decode-profile-x-0001"
    rec.mkdir(parents=True)
    (rec / "metadata.json").write_text(json.dumps({"kind": record.KIND, "configuration": "x"}))
    class_us = dict.fromkeys(classify.CLASSES, 0.0)
    kernels = dict.fromkeys(classify.CLASSES, 0.0)
    table: dict[tuple[str, str], dict[str, object]] = {}
    for name, cls in step_names:
        class_us[cls] += 10.0
        kernels[cls] += 1.0
        row = table.setdefault((name, cls), {"name": name, "class": cls, "per_step": 0.0, "us_per_step": 0.0})
        row["per_step"] = float(row["per_step"]) + 1.0  # type: ignore[arg-type]
        row["us_per_step"] = float(row["us_per_step"]) + 10.0  # type: ignore[arg-type]
    (rec / "kernels-b1.json").write_text(json.dumps(list(table.values())))
    (rec / "step-b1.json").write_text(json.dumps([
        {"name": n, "class": c, "start_us": 10.0 * i, "dur_us": 10.0, "launch": "graph"}
        for i, (n, c) in enumerate(step_names)]))
    (rec / record.SUMMARY).write_text(json.dumps({"classes_sha256": "old", "batches": {"1": {
        "batch": 1, "decode_steps": 2, "step_period_us": {"median": 100.0},
        "tokens_per_s_per_user_from_period": 1e4, "kernels_per_step": float(len(step_names)),
        "gpu_busy_us": 60.0, "gpu_idle_total_us": 40.0, "host_execute_model_us": 50.0,
        "graph_launches_per_step": 1.0, "class_us": class_us, "class_kernels": kernels,
        "trace": {"raw_trace": None, "note": "raw trace left out"}}}}))
    return rec


def test_reclassify_without_the_raw_trace_moves_the_kept_steps_kernels(tmp_path: Path) -> None:
    """A record made before the classes knew vllm/0010's kernel: its O projection was counted as the
    router's GEMM. Classified again from the kept step, the O GEMM and its quantization move to qkv-o-gemm
    in the kernel table and the summary."""
    from sparkserve_lab.cli.main import main

    layer = [("flash_fwd_splitkv_kernel", "attention"), ("process_input_kernel<C>", "router-topk"),
             ("humming<MmaOpClass, Shape<0u, 3072u>>", "router-topk"),
             ("_bias_router_topk_kernel", "router-topk"),
             ("_gate_up_swiglu_kernel", "moe-gemm1"), ("_down_combine_kernel", "moe-gemm2")]
    rec = _kept_record(tmp_path, layer * 2)
    assert main(["trace", "reclassify", str(rec), "--store", str(tmp_path / "results")]) == 0
    b1 = record.summary(rec)["batches"]["1"]
    assert b1["class_us"]["router-topk"] == 20.0 and b1["class_kernels"]["router-topk"] == 2.0
    assert b1["class_us"]["qkv-o-gemm"] == 40.0 and b1["class_kernels"]["qkv-o-gemm"] == 4.0
    assert b1["trace"]["raw_trace"] is None
    assert record.summary(rec)["reclassified"][0]["before"]["batches"]["1"]["from"].startswith("the kept")
    table = {(r["name"], r["class"]): r for r in read_json(rec / "kernels-b1.json")}
    assert table[("humming<MmaOpClass, Shape<0u, 3072u>>", "qkv-o-gemm")]["us_per_step"] == 20.0
    assert [e["class"] for e in read_json(rec / "step-b1.json")][:4] == [
        "attention", "qkv-o-gemm", "qkv-o-gemm", "router-topk"]


def test_reclassify_without_the_raw_trace_refuses_a_kernel_it_cannot_place(tmp_path: Path) -> None:
    """The same (name, class) of the kept step in two new classes: the table's one row cannot be split."""
    from sparkserve_lab.cli.main import main

    rec = _kept_record(tmp_path, [
        ("flash_fwd_splitkv_kernel", "attention"), ("nvjet_gemm", "qkv-o-gemm"), ("nvjet_gemm", "qkv-o-gemm"),
        ("topkGatingSoftmax", "router-topk"), ("_gate_up_swiglu_kernel", "moe-gemm1")])
    assert main(["trace", "reclassify", str(rec), "--store", str(tmp_path / "results")]) != 0
    assert record.summary(rec)["classes_sha256"] == "old"


PROFILE_VERBS = {
    "decode": ["trace", "decode", "--base-url", "http://127.0.0.1:1", "--trace-dir", "t",
               "--configuration", "c"],
    "summarize": ["trace", "summarize", "trace.json.gz"],
}


@pytest.mark.parametrize("verb", sorted(PROFILE_VERBS))
@pytest.mark.parametrize(("bad", "why"), [
    ("1,,32", "(an empty item)"), ("1,32,", "(an empty item)"), ("0", "(0 is below 1)"),
    ("-1", "(-1 is below 1)"), ("1,b32", "('b32' is not a whole number)"),
])
def test_profile_refuses_a_bad_batch_list_as_a_usage_error(verb: str, bad: str, why: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from sparkserve_lab.cli.main import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*PROFILE_VERBS[verb], f"--batch={bad}"])
    assert e.value.code == 2
    assert (f"argument --batch: expected whole numbers >= 1 separated by commas, got {bad!r} {why}"
            in capsys.readouterr().err)


@pytest.mark.parametrize(("verb", "default"), [("decode", [1, 32]), ("summarize", [1])])
def test_profile_takes_a_batch_list_with_spaces_or_one_value(verb: str, default: list[int]) -> None:
    from sparkserve_lab.cli.main import build_parser

    argv = PROFILE_VERBS[verb]
    assert build_parser().parse_args([*argv, "--batch", "1, 8 ,32"]).batch == [1, 8, 32]
    assert build_parser().parse_args([*argv, "--batch", "8"]).batch == [8]
    assert build_parser().parse_args(argv).batch == default


def test_a_wrong_type_in_the_estimate_inputs_is_named_where_it_is(tmp_path: Path) -> None:
    text = (ROOT / estimate.DEFAULT_FILE).read_text()
    bad = tmp_path / "gb10-estimate.toml"
    bad.write_text(text.replace("gb10_measured_gbs = 232", 'gb10_measured_gbs = "fast"'))
    with pytest.raises(SparkserveError) as info:
        estimate.load(bad)
    assert str(info.value) == f"{bad}: bandwidth.gb10_measured_gbs: expected a number, got 'fast'"


def test_the_estimate_inputs_keep_their_sources() -> None:
    inputs = estimate.load(ROOT / estimate.DEFAULT_FILE)
    assert set(inputs.sources) == {"gb10_nominal_source", "gb10_measured_source", "h100_nominal_source",
                                   "h200_nominal_source"}
    assert inputs.model["experts"] == 128.0 and inputs.measured_gpu_gbs == 3350.0
    assert inputs.h200_gbs == 4800.0


def test_the_byte_time_taken_off_is_the_measured_gpus() -> None:
    """A breakdown measured on an H200 has its classes' byte time taken off at the H200's bandwidth: the
    same measured time leaves less non-byte time than on an H100."""
    inputs = estimate.load(ROOT / estimate.DEFAULT_FILE)
    layers = {"moe", "qkv", "o", "lm_head"}
    h100 = estimate.estimate(inputs, {"moe-gemm1": 1000.0}, 1, 0, layers, 1.0, 250.0)["classes"]["moe-gemm1"]
    h200 = estimate.estimate(inputs, {"moe-gemm1": 1000.0}, 1, 0, layers, 1.0, 250.0,
                             inputs.h200_gbs)["classes"]["moe-gemm1"]
    assert h200["byte_us_measured_gpu"] == pytest.approx(h100["byte_us_measured_gpu"] * 3350 / 4800, rel=1e-3)
    assert h200["gb10_us"] > h100["gb10_us"]


def _breakdown(store: Path, run_id: str, kernels: list[str], moe_us: float, hardware: str = "nvidia-h200",
               configuration: str = "hopper-h100") -> None:
    rec = store / hardware / run_id
    rec.mkdir(parents=True)
    (rec / "metadata.json").write_text(json.dumps({"kind": record.KIND, "configuration": configuration}))
    (rec / record.SUMMARY).write_text(json.dumps({"batches": {"1": {"class_us": {"moe-gemm1": moe_us}}}}))
    (rec / "kernels-b1.json").write_text(json.dumps([{"name": n, "class": "moe-gemm1"} for n in kernels]))


def test_the_gemv_step_estimate_starts_from_a_breakdown_with_vllm_0007s_kernels(tmp_path: Path) -> None:
    """The estimate of vllm/0007's step takes the newest H200 breakdown whose kernels are vllm/0007's, not
    a newer one of Marlin's step; without one it says so."""
    from sparkserve_lab.report import decode
    from sparkserve_lab.runstore import Store

    repo = tmp_path / "repo"  # the repository's profiles and estimate inputs, a store of its own
    (repo / "lab").mkdir(parents=True)
    (repo / "profiles").symlink_to(ROOT / "profiles")
    (repo / "lab" / "configs").symlink_to(ROOT / "lab" / "configs")
    store = repo / "lab" / "results"
    gemv, marlin = sorted(decode.GEMV_KERNELS), ["marlin_moe_wna16::Marlin"]
    _breakdown(store, "20261202T000000Z-decode-profile-hopper-h100-gemv", gemv, 1200.0)
    _breakdown(store, "20261203T000000Z-decode-profile-hopper-h100-marlin", marlin, 1400.0)
    text = "\n".join(decode.estimate_section(Store(store), repo))
    section = text[text.index("### The step with vllm/0007"):]
    assert "decode-profile-hopper-h100-gemv" in section and "-marlin" not in section
    assert "| spark + marlin-gemv | 1 |" in section
    (store / "nvidia-h200" / "20261202T000000Z-decode-profile-hopper-h100-gemv" / "kernels-b1.json").unlink()
    text = "\n".join(decode.estimate_section(Store(store), repo))
    assert "No `hopper-h100` breakdown on an H200 with vllm/0007's kernels in the store." in text


def test_the_new_step_estimate_starts_from_an_h100_breakdown_with_one_launch_routing(tmp_path: Path) -> None:
    """The estimate of the step with vllm/0010's routing takes the newest H100 breakdown of the shipped
    profile (with overrides) whose kernels include vllm/0010's beside vllm/0007's, not a newer one without it,
    nor another profile's."""
    from sparkserve_lab.report import decode
    from sparkserve_lab.runstore import Store

    repo = tmp_path / "repo"
    (repo / "lab").mkdir(parents=True)
    (repo / "profiles").symlink_to(ROOT / "profiles")
    (repo / "lab" / "configs").symlink_to(ROOT / "lab" / "configs")
    store = repo / "lab" / "results"
    h100 = "nvidia-h100-80gb-hbm3"
    _breakdown(store, "20261206T000000Z-decode-profile-topk-1", sorted(decode.NEW_STEP_KERNELS), 700.0, h100,
               "hopper-h100+VLLM_ROUTER_GEMV_TOPK=1")
    _breakdown(store, "20261206T010000Z-decode-profile-topk-0", sorted(decode.GEMV_KERNELS), 700.0, h100,
               "hopper-h100+VLLM_ROUTER_GEMV_TOPK=0")
    _breakdown(store, "20261206T020000Z-decode-profile-other", sorted(decode.NEW_STEP_KERNELS), 700.0, h100,
               "spark")
    text = "\n".join(decode.estimate_section(Store(store), repo))
    section = text[text.index("### The step with vllm/0010"):]
    assert "decode-profile-topk-1" in section and "topk-0" not in section and "-other" not in section
    assert "`hopper-h100+VLLM_ROUTER_GEMV_TOPK=1`" in section
    assert "| spark + marlin-gemv + router top-k | 1 |" in section
    (store / h100 / "20261206T000000Z-decode-profile-topk-1" / "kernels-b1.json").unlink()
    text = "\n".join(decode.estimate_section(Store(store), repo))
    assert ("No `hopper-h100` breakdown on an H100 with vllm/0010's routing beside vllm/0007's kernels in "
            "the store.") in text
