"""Level 1.5 on the MoE tactic lines of patch vllm 0004: each token count's last line, its tactic ids
described, and the spark profile's rule that decode token counts run SwapAB tactics."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_logs import engine_log
from sparkserve_lab.validate import kernels, logparse

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "lab" / "configs" / "engine-kernels.toml"
PREFIX = "(Worker pid=4188) INFO 11-21 14:05:0{s} [flashinfer_moe_tactics.py:82] "


def line(tokens: int, g1: int, g2: int, source: str = "autotuner", counts: str = "6+12",
         kind: str = "mxfp8 x mxfp4, sm121", s: int = 1) -> str:
    return (PREFIX.format(s=s) + f"FlashInfer CUTLASS MoE tactics for {tokens} tokens: gemm1={g1} gemm2={g2} "
            f"of {counts} ({kind}; {source}).")


def spark_log(*lines: str) -> str:
    return engine_log("spark-cutlass-mxfp8.log").read_text() + "\n".join(lines) + "\n"


def validate(text: str) -> kernels.Validation:
    return kernels.check(kernels.load_kernel_rules(RULES)["spark-moe-decode-swapab"], text)


def test_last_line_per_token_count_is_described() -> None:
    facts = logparse.parse_text(spark_log(
        line(8192, 0, 6),  # memory profiling before autotuning: FlashInfer's defaults
        line(8192, 2, 11),  # tuned
        line(1, 4, 16), line(64, 5, 17),
        line(8, 6, 17, counts="8+16"),  # the FlashInfer build with N = 8/16 SwapAB tiles
        line(2, 1, 2, counts="9+9"),  # a tactic list sparkserve does not know
        line(4, 0, 1, kind="bf16 x mxfp4, sm90", counts="116+116", source="table /t.json, bucket 4"),
    ))
    assert facts.selected["moe_tactic"] == [
        "tokens=1 gemm1=128x32x128/swap_ab gemm2=128x32x128/swap_ab/finalize source=autotuner",
        "tokens=2 gemm1=unknown#1 gemm2=unknown#2 source=autotuner",
        "tokens=4 gemm1=64x16x128/swap_ab/pingpong gemm2=unknown#1 source=table",
        "tokens=8 gemm1=128x8x128/swap_ab gemm2=128x8x128/swap_ab source=autotuner",
        "tokens=64 gemm1=128x64x128/swap_ab gemm2=128x64x128/swap_ab/finalize source=autotuner",
        "tokens=8192 gemm1=128x64x128/no_swap gemm2=128x64x128/no_swap/finalize source=autotuner",
    ]
    assert facts.to_dict()["moe_tactics"]["8192"]["gemm1"] == 2  # type: ignore[index]


def test_decode_on_swap_ab_passes() -> None:
    v = validate(spark_log(line(1, 4, 16), line(2, 4, 16), line(64, 5, 17), line(512, 0, 9)))
    assert v.valid, [c.line() for c in v.failures()]


@pytest.mark.parametrize(("bad", "why"), [
    (line(16, 0, 6), "no_swap"),  # FlashInfer's untuned default at a decode size
    (line(32, 4, 9), "no_swap"),  # GEMM2 without SwapAB
    (line(8, 4, 16, counts="7+14"), "unknown#"),  # cannot be told
])
def test_decode_without_swap_ab_is_invalid(bad: str, why: str) -> None:
    v = validate(spark_log(line(1, 4, 16), bad))
    assert not v.valid
    assert any(why in c.detail for c in v.failures())


def test_no_tactic_lines_is_invalid() -> None:
    v = validate(spark_log())
    assert not v.valid and any("no moe_tactic selection seen" in c.detail for c in v.failures())


def test_table_configuration_wants_every_call_from_the_table() -> None:
    rules = kernels.load_kernel_rules(RULES)["cutlass-mxfp8-table"]
    table = "table /var/lib/sparkserve/moe-tactics.json, bucket 1"
    assert kernels.check(rules, spark_log(line(1, 4, 16, source=table))).valid
    mixed = spark_log(line(1, 4, 16, source=table), line(512, 0, 9))
    assert not kernels.check(rules, mixed).valid
