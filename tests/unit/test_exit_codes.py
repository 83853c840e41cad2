"""The entrypoint's exit codes mean one thing each, each says what to do, and README.md's table is the one
serving/preflight.py makes of them."""

from __future__ import annotations

from pathlib import Path

from sparkserve.serving import preflight

ROOT = Path(__file__).resolve().parents[2]
CODES = set(preflight.EXIT_CODES)


def test_the_codes_are_distinct_and_each_gate_ends_with_known_ones() -> None:
    assert sorted(CODES) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert all(set(codes) <= CODES for codes in preflight.GATE_EXITS.values())
    assert set(preflight.EXIT_FIX) == CODES


def test_the_readme_table_is_the_generated_one() -> None:
    text = (ROOT / "README.md").read_text()
    between = text.split("<!-- exit codes: begin -->\n", 1)[1].split("<!-- exit codes: end -->", 1)[0]
    assert between == preflight.exit_code_table(), (
        "README.md's exit codes are stale: put the output of `python -m sparkserve.serving.preflight` "
        "between its markers")


def test_each_gate_names_its_codes_in_the_table() -> None:
    rows = {int(r.split("|")[1]): r for r in preflight.exit_code_table().splitlines()[2:]}
    for gate, codes in preflight.GATE_EXITS.items():
        for code in CODES:
            assert (f"`{gate}`" in rows[code]) == (code in codes), (gate, code)
