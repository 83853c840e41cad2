import pytest

from sparkserve.supply.patches import header

GOOD = """Description: Fix a thing
 More words.
 .
 After a blank line.
Author: someone
Origin: vendor
Forwarded: no
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
