"""The `sparkserve-lab` command line: one verb per job, documented exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sparkserve_lab.cli.main import build_parser, main

from sparkserve.cli import common

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
    """The lab's verbs: fixture generators are not verbs (they live in `python -m sparkserve_lab.testing`);
    `validate` checks a kernel against its reference on a GPU (`validate moe`, `validate loader`), not an
    engine log; the torch profiler is `trace`; `serve` is the one way the GPU scripts and CI start a
    server; the product's verbs are not here."""
    verbs = _verbs()
    assert verbs == {"level", "serve", "ab", "trace", "speculative", "moe", "validate", "mutate", "baseline",
                     "report", "metadata", "proof", "metrics"}
    assert _subverbs("validate") == {"moe", "loader"}
    assert _subverbs("moe") == {"sweep", "install", "tactics"}
    assert _subverbs("trace") == {"decode", "prefill", "summarize", "reclassify"}


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
    out = subprocess.run([sys.executable, "-m", "sparkserve_lab.testing", "--help"], capture_output=True,
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


LEVEL4 = ["level", "4", "--base-url", "http://127.0.0.1:1", "--tokenizer", "tok", "--configuration", "c"]


@pytest.mark.parametrize("option", ["--pp", "--tg", "--depth", "--concurrency"])
@pytest.mark.parametrize(("bad", "why"), [
    ("4,,5", "(an empty item)"), ("4,", "(an empty item)"), ("-1", "(-1 is below"),
    ("4,x", "('x' is not a whole number)"),
])
def test_level4_refuses_a_bad_list(option: str, bad: str, why: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*LEVEL4, f"{option}={bad}"])
    assert e.value.code == common.USAGE
    err = capsys.readouterr().err
    assert f"argument {option}: expected whole numbers >= " in err and f"got {bad!r} {why}" in err


@pytest.mark.parametrize("option", ["--pp", "--tg", "--concurrency"])
def test_level4_refuses_zero_but_a_depth_of_0_is_no_context(option: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*LEVEL4, option, "0"])
    assert e.value.code == common.USAGE and "got '0' (0 is below 1)" in capsys.readouterr().err
    assert build_parser().parse_args([*LEVEL4, "--depth", "0"]).depth == [0]


@pytest.mark.parametrize("option", ["--pp", "--tg", "--depth", "--concurrency"])
def test_level4_takes_a_list_with_spaces_or_one_value(option: str) -> None:
    from sparkserve_lab.bench import presets

    dest = option.lstrip("-")
    assert getattr(build_parser().parse_args([*LEVEL4, option, "1, 2 ,4"]), dest) == [1, 2, 4]
    a = build_parser().parse_args([*LEVEL4, option, "256"])
    assert getattr(a, dest) == [256]
    preset = presets.get(a.preset).with_overrides(a.pp, a.tg, a.depth, a.concurrency, a.runs)
    assert getattr(preset, dest) == (256,)  # what cmd_bench hands llama-benchy


@pytest.mark.parametrize(("bad", "why"), [
    ("1,,7", "(an empty item)"), ("1,7,", "(an empty item)"), ("0", "(0 is below 1)"),
    ("-7", "(-7 is below 1)"), ("all", "('all' is not a whole number)"),
])
def test_validate_moe_refuses_a_bad_token_list(bad: str, why: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["validate", "moe", f"--tokens={bad}"])
    assert e.value.code == common.USAGE
    assert (f"argument --tokens: expected whole numbers >= 1 separated by commas, got {bad!r} {why}"
            in capsys.readouterr().err)


@pytest.mark.parametrize(("text", "want"), [("64", (64,)), ("64, 1,7 ,1", (1, 7, 64)), (None, (5, 3))])
def test_validate_moe_checks_each_token_count_once_in_order(text: str | None, want: tuple[int, ...],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The list reaches the check sorted, without repeats (as harness.moe.buckets.parse gave it); no
    --tokens: the check's own default. The harness's modules import torch: stand-ins here."""
    import types

    import sparkserve_lab.moe as package
    from sparkserve_lab.cli import moe

    got: list[tuple[int, ...]] = []

    def run_validate(_target: object, tokens: tuple[int, ...], *_rest: object) -> tuple[bool, None]:
        got.append(tokens)
        return True, None

    fakes = {"commands": types.SimpleNamespace(run_validate=run_validate),
             "validate": types.SimpleNamespace(DEFAULT_TOKENS=(5, 3))}
    for name, fake in fakes.items():
        monkeypatch.setitem(sys.modules, f"sparkserve_lab.moe.{name}", fake)
        monkeypatch.setattr(package, name, fake, raising=False)
    for helper in ("_need_torch", "_target", "_output"):
        monkeypatch.setattr(moe, helper, lambda *_: None)
    assert main(["validate", "moe", *(["--tokens", text] if text is not None else [])]) == common.OK
    assert got == [want]
