"""`moe sweep` and `validate moe` end to end on a CPU (--dry-run: everything but the kernel launch): the
record, the table, its install, and a tactic that computes the wrong thing failing the sweep. Needs torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from sparkserve_lab.moe import commands, sweep  # noqa: E402
from sparkserve_lab.moe.dryrun import DryRunBackend  # noqa: E402
from sparkserve_lab.moe.weights import random_experts  # noqa: E402

from sparkserve.serving.moe import state, tactics  # noqa: E402
from sparkserve.serving.moe import table as tables  # noqa: E402
from sparkserve.serving.moe.shape import MoeShape  # noqa: E402

SHAPE = MoeShape("test", hidden=96, intermediate=80, experts=8, top_k=2)
CFG = sweep.Config(buckets=(1, 4), replays=2, warmup=0, repeats=1)


def out(tmp_path: Path) -> commands.Output:
    return commands.Output(tmp_path / "results", tmp_path, "dry-run-test", ("sparkserve", "moe", "sweep"))


def test_sweep_writes_record_table_and_installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKSERVE_PROOF_DIR", raising=False)
    target = commands.Target(SHAPE, dry_run_path=tactics.SM120_MXFP8_MXFP4)
    ok, rec = commands.run_sweep(target, CFG, out(tmp_path), tmp_path / "state")
    assert ok
    meta = json.loads((rec / "metadata.json").read_text())
    assert meta["kind"] == "moe-sweep" and meta["verdict"] == "pass" and meta["simulated"]
    assert set(meta["files"]) == {"moe-tactics.json", "sweep.json", "sweep.jsonl", "flashinfer-module.json"}
    summary = json.loads((rec / "sweep.json").read_text())
    assert summary["tactics"]["counts"] == [6, 12] and "synthetic" in summary["timings"]
    lines = (rec / "sweep.jsonl").read_text().splitlines()
    assert len(lines) == 2 * (1 + 6 + 12)  # per bucket: default, every GEMM1, every GEMM2 tactic
    table = tables.load(tmp_path / "state" / state.TABLE_FILE)
    assert [e.tokens for e in table.entries] == [1, 4]
    assert table.measurement["synthetic"] and table.build.tactic_counts == (6, 12)
    assert all(0 <= e.gemm1 < 6 <= e.gemm2 < 18 for e in table.entries)
    env = tables.Environment(table.build.flashinfer_version, table.build.flashinfer_patches, "12.1",
                             tactics.SM120_MXFP8_MXFP4, table.shape)
    assert any("CPU dry run" in p for p in tables.check(table, env))  # never served


def test_validate_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKSERVE_PROOF_DIR", raising=False)
    target = commands.Target(SHAPE, dry_run_path=tactics.SM90_BF16_MXFP4)
    ok, rec = commands.run_validate(target, (1, 7), 0, False, None, out(tmp_path))
    assert ok
    result = json.loads((rec / "validate.json").read_text())
    assert result["summary"] == {"checks": 2, "correct": 2, "wrong": 0, "errors": 0}


def test_under_proof_run_artifacts_go_to_the_proof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKSERVE_PROOF_DIR", str(tmp_path / "proof"))
    (tmp_path / "proof").mkdir()
    ok, rec = commands.run_validate(commands.Target(SHAPE, dry_run_path=tactics.SM90_BF16_MXFP4), (1,), 0,
                                    False, None, out(tmp_path))
    assert ok and rec == tmp_path / "proof" and (rec / "validate.json").is_file()
    assert not (rec / "metadata.json").exists()  # `proof run` writes it


class OneWrongTactic(DryRunBackend):
    def run(self, profile_ids: list[int] | None) -> torch.Tensor:
        good = super().run(profile_ids)
        return good * 1.5 if profile_ids and profile_ids[0] == 4 else good


def test_a_wrong_tactic_fails_the_sweep(tmp_path: Path) -> None:
    b = OneWrongTactic(SHAPE, tactics.SM120_MXFP8_MXFP4)
    b.load(random_experts(SHAPE, seed=0))
    s = sweep.Sweep(b, CFG, tmp_path, say=lambda _: None)
    results, space = s.run()
    ok, problems = sweep.verdict(results)
    assert not ok and "disagree with the reference" in problems[0] and "[4, -1]" in problems[0]
    table = sweep.make_table(results, space, b, tables.Build("x", (), b.path, space.counts, "12.1"), {}, {})
    assert all(e.gemm1 != 4 for e in table.entries)  # never chosen


@pytest.mark.parametrize(("cc", "activation", "path"), [
    ((9, 0), None, tactics.SM90_BF16_MXFP4), ((12, 1), None, tactics.SM120_MXFP8_MXFP4),
    ((8, 0), None, None), ((10, 0), None, None), ((9, 0), "mxfp8", None), ((12, 1), "bf16", None),
])
def test_gpu_path_or_what_is_supported(monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int],
                                       activation: str | None, path: str | None) -> None:
    from sparkserve_lab.moe import kernel

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Some GPU")
    if path:
        assert kernel.choose_path(torch.device("cuda", 0), activation) == path
        return
    with pytest.raises(kernel.Unsupported) as info:
        kernel.choose_path(torch.device("cuda", 0), activation)
    msg = str(info.value)
    assert f"Some GPU (compute capability {cc[0]}.{cc[1]})" in msg
    assert tactics.SM90_BF16_MXFP4 in msg and tactics.SM120_MXFP8_MXFP4 in msg and "H100" in msg
