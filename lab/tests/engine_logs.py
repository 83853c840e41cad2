"""Engine logs for the level-1.5 tests, by name: recorded ones are read where the run store keeps them
(results/), hand-written ones from tests/data/engine-logs/ (its README says which is which)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "lab" / "results" / "nvidia-h100-80gb-hbm3"
RECORDED = {
    # vLLM 0.33.0 + the series on an H100, random-weight gpt-oss-120b, --linear-backend marlin, Triton MoE
    "h100-flashinfer-sinks.log":
        H100 / "20261123T111438Z-flashinfer-sinks-offline-engine" / "ab_A_fi.json.0A.log",
    "h100-mxfp4-dense-fa3.log": H100 / "20261123T111438Z-lm-head-e2e-ab" / "ab_A_fa3.json.0A.log",
    "h100-linear-mxfp4-fa3.log": H100 / "20261123T111438Z-lm-head-e2e-ab" / "ab_B_fa3.json.0B.log",
}


def engine_log(name: str) -> Path:
    return RECORDED.get(name, ROOT / "tests" / "data" / "engine-logs" / name)
