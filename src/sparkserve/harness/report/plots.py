"""PNG plots for the report (matplotlib, Agg backend): tok/s vs depth, decode / prefill by configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.harness.bench.results import Row
from sparkserve.harness.report.anchors import Anchor, mid


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SparkserveError(
            "plots need matplotlib: pip install 'sparkserve[bench]' (or --no-plots)"
        ) from exc
    return plt


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})


def depth_plot(series: dict[str, list[Row]], title: str, path: Path) -> bool:
    """One line per configuration: decode and prefill tok/s (concurrency 1) against context depth."""
    plt = _plt()
    usable = {
        k: sorted((r for r in v if r.concurrency == 1), key=lambda r: r.depth) for k, v in series.items()
    }
    usable = {k: v for k, v in usable.items() if len({r.depth for r in v}) >= 2}
    if not usable:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rs in sorted(usable.items()):
        ax1.plot(
            [r.depth for r in rs if r.tg_tps], [r.tg_tps for r in rs if r.tg_tps], marker="o", label=name
        )
        ax2.plot(
            [r.depth for r in rs if r.pp_tps], [r.pp_tps for r in rs if r.pp_tps], marker="o", label=name
        )
    ax1.set(title="decode (tg) tok/s vs depth", xlabel="context depth (tokens)", ylabel="tok/s")
    ax2.set(title="prefill (pp) tok/s vs depth", xlabel="context depth (tokens)", ylabel="tok/s")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, path)
    plt.close(fig)
    return True


def decode_plot(bars: dict[str, float], anchors: list[Anchor], title: str, path: Path) -> bool:
    """Bars of decode tok/s at depth 0, concurrency 1, per configuration; external anchors hatched."""
    ext = [(f"{a.stack[:38]} (external)", mid(a.tg32)) for a in anchors if a.tg32]
    return _bars(bars, ext, title, "decode tok/s (depth 0, concurrency 1)", path, "{:.1f}")


def prefill_plot(bars: dict[str, float], title: str, path: Path) -> bool:
    """Bars of prefill tok/s at depth 0, concurrency 1, per configuration."""
    return _bars(bars, [], title, "prefill tok/s (depth 0, concurrency 1)", path, "{:,.0f}")


def _bars(
    bars: dict[str, float], ext: list[tuple[str, float]], title: str, xlabel: str, path: Path, fmt: str
) -> bool:
    if not bars and not ext:
        return False
    plt = _plt()
    labels = [*bars, *(e[0] for e in ext)]
    values = [*bars.values(), *(e[1] for e in ext)]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(labels) + 1.5))
    ys = list(range(len(labels)))
    colors = ["tab:blue"] * len(bars) + ["lightgray"] * len(ext)
    hatches = [""] * len(bars) + ["//"] * len(ext)
    for y, v, c, h in zip(ys, values, colors, hatches, strict=True):
        ax.barh(y, v, color=c, hatch=h, edgecolor="black", linewidth=0.5)
        ax.text(v, y, " " + fmt.format(v), va="center", fontsize=8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel, title=title)
    ax.grid(axis="x", alpha=0.3)
    _save(fig, path)
    plt.close(fig)
    return True
