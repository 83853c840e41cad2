"""The `sparkserve` command line: one verb per job, documented exit codes."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from sparkserve.cli import common
from sparkserve.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _verbs() -> set[str]:
    ap = build_parser()
    sub = next(a for a in ap._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


def _subverbs(verb: str) -> set[str]:
    ap = build_parser()
    sub = next(a for a in ap._actions if a.dest == "command")
    group = sub.choices[verb]  # type: ignore[index]
    inner = next(a for a in group._actions if a.dest == "what")
    return set(inner.choices)


def test_one_verb_per_job() -> None:
    """Aliases are gone (`bench` is `level 4`, `validate kernels` is `level 1.5`); fixture generators
    are not user-facing verbs (they live in `python -m sparkserve.testing`). `validate` checks a kernel
    against its reference on a GPU (`validate moe`, `validate loader`), not an engine log."""
    verbs = _verbs()
    assert {"pins", "sources", "lock", "wheels", "patches", "dev", "jit", "level", "baseline", "report",
            "metadata", "moe", "validate"} <= verbs
    assert not {"bench", "tiny-model", "gptoss-dummy"} & verbs
    assert _subverbs("validate") == {"moe", "loader"}
    assert _subverbs("moe") == {"sweep", "install", "tactics"}


def test_usage_error_is_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-verb"])
    assert exc.value.code == common.USAGE == 2


def test_runtime_error_is_3_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["level", "5", "--store", str(tmp_path), "--run", "nothing-here"])
    assert rc == common.ERROR == 3
    assert "run 'nothing-here': no match" in capsys.readouterr().err


def test_failed_check_is_1(tmp_path: Path) -> None:
    """level 1.5 on a log that does not show the configuration's kernels: a verdict, not an error."""
    log = ROOT / "tests" / "data" / "engine-logs" / "spark-cutlass-wrong-backend.log"
    rc = main(["level", "1.5", "--configuration", "cutlass-mxfp8", "--log", str(log),
               "--json-out", str(tmp_path / "v.json")])
    assert rc == common.FAILED == 1


def test_testing_fixtures_have_their_own_entry_point() -> None:
    out = subprocess.run([sys.executable, "-m", "sparkserve.testing", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "tiny-model" in out and "gptoss-dummy" in out


def test_gpu_verbs_without_torch_say_what_to_use(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a))
    for argv in (["validate", "moe", "--dry-run"], ["moe", "sweep", "--dry-run"]):
        assert main(argv) == common.ERROR
        assert "need torch" in capsys.readouterr().err


def test_a_folder_the_user_cannot_write_is_an_error_naming_it_and_the_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    """In the image the harness runs as uid 10001 and writes ./results of the host's checkout."""
    def store(_: object) -> int:
        raise PermissionError(13, "Permission denied", "/opt/sparkserve/results/x")

    ap = argparse.ArgumentParser()
    ap.set_defaults(func=store)
    assert common.run(ap, []) == common.ERROR
    err = capsys.readouterr().err
    assert "/opt/sparkserve/results/x: permission denied for uid" in err
    assert "chown -R 10001:10001 results" in err
