"""The committed reports are what `sparkserve report` writes from the committed run store.

A record added to results/ without regenerating the reports (or one the report cannot place) shows up
here instead of in the next session's diff."""

from __future__ import annotations

from pathlib import Path

from sparkserve.harness import provenance
from sparkserve.harness.report import anchors, configs, markdown, proofs
from sparkserve.harness.runstore import Store

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _without_plots(text: str) -> list[str]:
    # plots are written only with matplotlib (a plot with nothing to show is left out, while the
    # no-plots note is always there); the text around them is what is compared
    lines = [line for line in text.splitlines() if not line.startswith("![") and line != markdown.NO_PLOTS]
    return [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]


def test_benchmark_results_match_the_store() -> None:
    out = DOCS / "BENCHMARK_RESULTS.md"
    text = markdown.render(
        Store(ROOT / "results"), anchors.load(ROOT / anchors.DEFAULT_FILE), out, DOCS / "img" / "benchmarks",
        str(anchors.DEFAULT_FILE), make_plots=False, series=provenance.series_now(ROOT),
        configs=configs.load(ROOT / configs.DEFAULT_FILE),
    )
    assert _without_plots(out.read_text()) == _without_plots(text), "run `sparkserve report` and commit"


def test_proofs_match_the_store() -> None:
    out = DOCS / "PROOFS.md"
    text = proofs.render(Store(ROOT / "results"), out, provenance.series_now(ROOT))
    assert out.read_text() == text, "run `sparkserve report` and commit"


def test_every_stored_bench_run_has_numbers() -> None:
    # a record of another kind (start times, a proof) stored with a plain metadata file reads as a
    # benchmark run without results
    empty = [r.run_id for r in Store(ROOT / "results").runs() if r.bench() is None]
    assert not empty, f"benchmark records without llama-benchy results: {empty}"
