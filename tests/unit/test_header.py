from pathlib import Path

import pytest

from sparkserve.supply.patches import header

GOOD = """Description: Fix a thing
 More words.
 .
 After a blank line.
Author: someone
Origin: vendor
Forwarded: no
Forward: not ready: a test patch
Gate: always on
Proof: tests/x.py
Verified-On: cpu, h100
Last-Update: 2026-11-22
"""


def test_parses_fields_and_continuations() -> None:
    h = header.parse(GOOD)
    assert h.summary == "Fix a thing"
    assert h.fields["Description"] == "Fix a thing\nMore words.\n\nAfter a blank line."
    assert h.verified_on == ["cpu", "h100"]


@pytest.mark.parametrize("field", header.REQUIRED)
def test_each_required_field_is_required(field: str) -> None:
    text = "\n".join(
        ln for ln in GOOD.splitlines()
        if not ln.startswith(field + ":") and not (field == "Description" and ln.startswith(" "))
    )
    with pytest.raises(header.HeaderError, match=field):
        header.parse(text)


def test_rejects_unknown_verification_target() -> None:
    with pytest.raises(header.HeaderError, match="Verified-On"):
        header.parse(GOOD.replace("cpu, h100", "cpu, a100"))


def test_accepts_unverified_on_hardware() -> None:
    assert header.parse(GOOD.replace("cpu, h100", "unverified on hardware")).verified_on == [
        "unverified on hardware"
    ]


def test_rejects_free_text_lines() -> None:
    with pytest.raises(header.HeaderError, match="line 2"):
        header.parse("Description: x\nnot a field\n")


def test_rejects_duplicate_field() -> None:
    with pytest.raises(header.HeaderError, match="twice"):
        header.parse(GOOD + "Gate: again\n")


def test_patches_list_prints_every_header_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """`patches list` used to cut Gate at its first line (mid-sentence) and never print Proof."""
    from sparkserve.cli import main as cli
    from sparkserve.supply import pins
    from sparkserve.supply.patches.series import load_series

    assert cli.main(["patches", "list"]) == 0
    out = capsys.readouterr().out
    p = pins.load()
    checked = 0
    for name in p.upstreams:
        for patch in load_series(p.root, name):
            for field, value in patch.header.fields.items():
                first, *rest = value.split("\n")
                assert f"    {field}: {first}".rstrip() in out, (patch.id, field)
                for line in rest:
                    assert f"      {line}".rstrip() in out, (patch.id, field, line)
                checked += 1
    assert checked >= 4 * 8
    assert cli.main(["patches", "list", "--brief"]) == 0
    assert "0002-quantize-lm-head-online-to-mxfp4-marlin-w4a16: Quantize lm_head" in capsys.readouterr().out


def test_forward_says_ready_or_what_is_missing() -> None:
    h = header.parse(GOOD)
    assert not h.forward_ready and h.forward_why == "a test patch"
    ready = header.parse(GOOD.replace("Forward: not ready: a test patch", "Forward: ready: a one-line fix\n"
                                      " with its test"))
    assert ready.forward_ready and ready.forward_why == "a one-line fix with its test"
    for bad in ("Forward: yes", "Forward: not ready", "Forward: ready:"):
        with pytest.raises(header.HeaderError, match="Forward must be"):
            header.parse(GOOD.replace("Forward: not ready: a test patch", bad))


def test_the_code_hash_ignores_the_header_and_upstream_test_files(tmp_path: Path) -> None:
    """A record's patch is unchanged when only its DEP-3 header or an upstream test it updates changed (no
    site installs tests/); a change to shipped code is a change."""
    from sparkserve.supply.patches.series import load_patch

    head = ("Description: {d}\nAuthor: a <a@b.invalid>\nOrigin: vendor\nForwarded: no\n"
            "Forward: not ready: x\nGate: always on\nProof: none\nVerified-On: cpu\n"
            "Last-Update: 2026-11-22\n---\n")
    code = ("diff --git a/vllm/x.py b/vllm/x.py\n--- a/vllm/x.py\n+++ b/vllm/x.py\n"
            "@@ -1 +1 @@\n-a = 1\n+a = 2\n")
    test = ("diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n"
            "@@ -1 +1 @@\n-assert a\n+assert not a\n")

    def patch(name: str, text: str) -> str:
        (tmp_path / f"{name}.patch").write_text(text)
        return load_patch("vllm", tmp_path / f"{name}.patch").code_sha256

    base = patch("0001-base", head.format(d="x") + code)
    assert patch("0002-header", head.format(d="y") + code) == base
    assert patch("0003-test", head.format(d="x") + code + test) == base
    assert patch("0004-test-first", head.format(d="x") + test + code) == base
    assert patch("0005-code", head.format(d="x") + code.replace("a = 2", "a = 3")) != base
