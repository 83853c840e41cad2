"""The two generated documents, docs/BENCHMARK_RESULTS.md and docs/PROOFS.md, rendered from a run store."""

from __future__ import annotations

from pathlib import Path

from sparkserve_lab import provenance
from sparkserve_lab.report import anchors, configs, markdown, proofs
from sparkserve_lab.runstore import Store


def render(repo: Path, store: Store, out: Path, img: Path, anchor_file: str | None = None,
           rules_file: Path | None = None, make_plots: bool = True, plot_dir: Path | None = None
           ) -> dict[Path, str]:
    """{path: text} for the benchmark report at `out` and PROOFS.md beside it; plots go to `plot_dir`
    (default `img`) and are referenced as `img`. Default anchors and kernel rules: the repo's."""
    found = anchors.load(Path(anchor_file) if anchor_file else repo / anchors.DEFAULT_FILE)
    src = anchor_file or str(anchors.DEFAULT_FILE)  # as the report names it
    rules = configs.load(rules_file or repo / configs.DEFAULT_FILE)
    series = provenance.series_now(repo)
    proofs_out = out.parent / "PROOFS.md"
    return {
        out: markdown.render(store, found, out, img, src, make_plots, series, rules, plot_dir, repo),
        proofs_out: proofs.render(store, proofs_out, series, repo),
    }
