"""The committed reports are what `sparkserve report` writes from the committed run store.

A record added to results/ without regenerating the reports (or one the report cannot place) shows up
here instead of in the next session's diff."""

from __future__ import annotations

from pathlib import Path

from sparkserve_lab.report import documents, markdown
from sparkserve_lab.runstore import Store

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _without_plots(text: str) -> list[str]:
    # plots are written only with matplotlib (a plot with nothing to show is left out, while the
    # no-plots note is always there); the text around them is what is compared
    lines = [line for line in text.splitlines() if not line.startswith("![") and line != markdown.NO_PLOTS]
    return [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]


def _rendered() -> dict[Path, str]:
    # what `sparkserve report` writes, without plots
    out = DOCS / "BENCHMARK_RESULTS.md"
    return documents.render(ROOT, Store(ROOT / "lab" / "results"), out, DOCS / "img" / "benchmarks",
                            make_plots=False)


def test_benchmark_results_match_the_store() -> None:
    out = DOCS / "BENCHMARK_RESULTS.md"
    rendered = _without_plots(_rendered()[out])
    assert _without_plots(out.read_text()) == rendered, "run `sparkserve report` and commit"


def test_proofs_match_the_store() -> None:
    out = DOCS / "PROOFS.md"
    assert out.read_text() == _rendered()[out], "run `sparkserve report` and commit"


def test_every_stored_bench_run_has_numbers() -> None:
    # a record of another kind (start times, a proof) stored with a plain metadata file reads as a
    # benchmark run without results
    empty = [r.run_id for r in Store(ROOT / "lab" / "results").runs() if r.bench() is None]
    assert not empty, f"benchmark records without llama-benchy results: {empty}"
