"""The `sparkserve` command line: the product's verbs, user verbs first, documented exit codes."""

from __future__ import annotations

import argparse

import pytest

from sparkserve.cli import common
from sparkserve.cli.main import build_parser, main


def _verbs() -> list[str]:
    ap = build_parser()
    sub = next(a for a in ap._actions if a.dest == "command")
    return list(sub.choices)  # type: ignore[arg-type]


def test_the_product_lists_what_a_spark_owner_runs_first_and_no_lab_verb() -> None:
    verbs = _verbs()
    assert verbs[:3] == ["doctor", "profile", "level"]
    assert verbs.index("jit") == len(verbs) - 1  # the image build's own steps last
    assert not {"ab", "trace", "report", "proof", "mutate", "speculative", "baseline"} & set(verbs)


def test_usage_error_is_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-verb"])
    assert exc.value.code == common.USAGE == 2


def test_a_folder_the_user_cannot_write_is_an_error_naming_it_and_the_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    """In the image every verb runs as uid 10001, also on folders bind-mounted from the host."""
    def store(_: object) -> int:
        raise PermissionError(13, "Permission denied", "/opt/sparkserve/state/x")

    ap = argparse.ArgumentParser()
    ap.set_defaults(func=store)
    assert common.run(ap, []) == common.ERROR
    err = capsys.readouterr().err
    assert "/opt/sparkserve/state/x: permission denied for uid" in err
    assert "chown -R 10001:10001 FOLDER" in err


# --- comma lists of whole numbers (common.int_list): one parser for every such option ----------------------

@pytest.mark.parametrize(("text", "kwargs", "why"), [
    ("4,,5", {}, "(an empty item)"),
    ("4,", {}, "(an empty item)"),
    (",4", {}, "(an empty item)"),
    ("4, ,5", {}, "(an empty item)"),
    ("", {}, "(an empty item)"),
    ("0", {}, "(0 is below 1)"),
    ("-2", {"minimum": 0}, "(-2 is below 0)"),
    ("4,x", {}, "('x' is not a whole number)"),
    ("1.5", {}, "('1.5' is not a whole number)"),
    ("1_000", {}, "('1_000' is not a whole number)"),  # int() would take it
    ("3,9", {"maximum": 8}, "(9 is above 8)"),
])
def test_int_list_refuses_and_says_what_it_expects(text: str, kwargs: dict[str, int], why: str) -> None:
    with pytest.raises(ValueError) as e:
        common.int_list(text, **kwargs)
    lo = kwargs.get("minimum", 1)
    bounds = f"from {lo} to {kwargs['maximum']}" if "maximum" in kwargs else f">= {lo}"
    assert str(e.value) == f"expected whole numbers {bounds} separated by commas, got {text!r} {why}"


@pytest.mark.parametrize(("text", "kwargs", "want"), [
    ("7", {}, [7]),
    ("4,5,8", {}, [4, 5, 8]),
    (" 4 , 5,8 ", {}, [4, 5, 8]),
    ("0 1024 2048", {"minimum": 0}, [0, 1024, 2048]),  # spaces alone separate too
    ("8,1,8", {"maximum": 8}, [8, 1, 8]),  # the order and repeats as given
])
def test_int_list_takes_whole_numbers(text: str, kwargs: dict[str, int], want: list[int]) -> None:
    assert common.int_list(text, **kwargs) == want


def test_int_list_arg_is_a_usage_error_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    ap = argparse.ArgumentParser(prog="x")
    ap.add_argument("--n", type=common.int_list_arg(minimum=2))
    assert ap.parse_args(["--n", "2,3"]).n == [2, 3]
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["--n", "1"])
    assert e.value.code == common.USAGE
    assert ("x: error: argument --n: expected whole numbers >= 2 separated by commas, got '1' (1 is below 2)"
            in capsys.readouterr().err)




def test_json_prints_the_verbs_data_and_a_verb_without_data_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["--json", "pins"]) == common.OK
    data = json.loads(capsys.readouterr().out)
    assert data["upstreams"]["vllm"]["version"] and data["torch"]
    assert main(["--json", "patches", "list", "--upstream", "vllm"]) == common.OK
    series = json.loads(capsys.readouterr().out)["vllm"]
    assert series and all(p["id"] and p["files"] for p in series)
    with pytest.raises(SystemExit) as exc:
        main(["--json", "patches", "check", "--no-tree"])
    assert exc.value.code == common.USAGE
    assert "prints no data to give as JSON" in capsys.readouterr().err


def test_quiet_keeps_errors_and_drops_progress(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkserve import progress

    try:
        assert main(["-q", "profile", "check", "no-such-profile-here"]) == 2
        err = capsys.readouterr().err
        assert "invalid serving profile" in err  # the refusal, even with -q
        progress.set_verbosity(progress.QUIET)
        progress.say("progress line")
        progress.detail("detail line")
        assert capsys.readouterr().err == ""
        progress.set_verbosity(progress.VERBOSE)
        progress.detail("detail line")
        assert capsys.readouterr().err == "detail line\n"
    finally:
        progress.set_verbosity(progress.NORMAL)
