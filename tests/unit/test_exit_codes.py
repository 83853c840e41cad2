"""The entrypoint's exit codes mean one thing each, and the README, docs/ARCHITECTURE.md and the gate
comments of docker-compose.yml list the same codes as serving/preflight.py."""

from __future__ import annotations

import re
from pathlib import Path

from sparkserve.serving import preflight

ROOT = Path(__file__).resolve().parents[2]
CODES = set(preflight.EXIT_CODES)


def codes_listed(sentence: str) -> set[int]:
    """`2 an invalid ..., 3 no GPU ..., ...`: the numbers that start an item."""
    return {int(n) for n in re.findall(r"(?:^|[,:;] )(\d) (?=[a-z`])", sentence.strip())}


def gates(text: str) -> dict[str, set[int]]:
    return {g: {int(n) for n in nums.split(", ")}
            for g, nums in re.findall(r"`?(preflight|gpu-check|download)`? \(?(\d(?:, \d)*)", text)}


def expected_gates() -> dict[str, set[int]]:
    return {g: set(codes) for g, codes in preflight.GATE_EXITS.items()}


def test_the_codes_are_distinct_and_each_gate_ends_with_known_ones() -> None:
    assert sorted(CODES) == [2, 3, 4, 5, 6, 7, 8]
    assert all(set(codes) <= CODES for codes in preflight.GATE_EXITS.values())


def test_the_readme_lists_the_entrypoints_codes_and_the_gates() -> None:
    text = " ".join((ROOT / "README.md").read_text().split("## Exit codes", 1)[1].split())
    entrypoint = text.split("The image's entrypoint:", 1)[1].split("; once vLLM runs", 1)[0]
    assert codes_listed(entrypoint) == CODES, entrypoint
    assert gates(text.split("Under compose", 1)[1]) == expected_gates()


def test_architecture_lists_the_same() -> None:
    text = " ".join((ROOT / "docs" / "ARCHITECTURE.md").read_text().split("## Exit codes", 1)[1].split())
    entrypoint = text.split("The entrypoint", 1)[1].split("The compose gates", 1)[0]
    assert codes_listed(entrypoint) == CODES, entrypoint
    assert gates(text.split("The compose gates", 1)[1]) == expected_gates()


def test_the_compose_file_names_each_gates_codes() -> None:
    comments = " ".join(line.lstrip("# ") for line in (ROOT / "docker-compose.yml").read_text().splitlines()
                        if line.startswith("#"))
    listed = comments.split("exit codes:", 1)[1].split("The server runs offline", 1)[0]
    assert gates(listed.split(" (", 1)[0]) == expected_gates()
    assert codes_listed(listed.split(" (", 1)[1]) == CODES


def test_the_entrypoints_docstring_lists_them() -> None:
    from sparkserve.serving import __main__ as entry

    doc = " ".join((entry.__doc__ or "").split())
    assert codes_listed(doc.split("Exit codes", 1)[1].split("Serving,", 1)[0]) == CODES | {0}
