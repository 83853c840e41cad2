"""PNG plots for the report (matplotlib, Agg backend): tok/s vs depth, decode / prefill by configuration.

Every plot says what it measured: the hardware and, where true, "random weights" (a subtitle); every
measured value carries its spread (± one standard deviation over the runs, as error bars); the shipped
default configuration is marked; labels are wrapped at word boundaries, never cut. Two depths are shown
as points with error bars, not joined by a line: two noisy points are no trend.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab.bench.results import Row
from sparkserve_lab.report.anchors import Anchor, mid

LABEL_WIDTH = 30
# Fewer depths than this are drawn as points without a connecting line.
MIN_POINTS_FOR_A_LINE = 3
SHIPPED = "shipped default"


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    std: float | None = None
    shipped: bool = False
    text: str = ""  # the value as printed next to the bar (default: value ± std)


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SparkserveError(
            "plots need matplotlib: pip install 'sparkserve-lab[bench]' (or --no-plots)"
        ) from exc
    return plt


def wrap(label: str, width: int = LABEL_WIDTH) -> str:
    """Wrapped at spaces only: a word (also one with hyphens, such as --exp-mxfp4) is never cut."""
    return "\n".join(textwrap.wrap(label, width, break_long_words=False, break_on_hyphens=False)) or label


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})


def _titles(fig: Any, title: str, subtitle: str) -> None:
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)


def depth_plot(series: dict[str, list[Row]], title: str, subtitle: str, path: Path) -> bool:
    """One series per configuration: decode and prefill tok/s (concurrency 1) against context depth,
    mean ± std; joined by a line only from MIN_POINTS_FOR_A_LINE depths on."""
    plt = _plt()
    usable = {
        k: sorted((r for r in v if r.concurrency == 1), key=lambda r: r.depth) for k, v in series.items()
    }
    usable = {k: v for k, v in usable.items() if len({r.depth for r in v}) >= 2}
    if not usable:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    few = False
    for name, rs in sorted(usable.items()):
        line = "-" if len({r.depth for r in rs}) >= MIN_POINTS_FOR_A_LINE else "none"
        few = few or line == "none"
        for ax, val, std in ((ax1, "tg_tps", "tg_std"), (ax2, "pp_tps", "pp_std")):
            pts = [r for r in rs if getattr(r, val)]
            ax.errorbar([r.depth for r in pts], [getattr(r, val) for r in pts],
                        yerr=[getattr(r, std) or 0.0 for r in pts], marker="o", linestyle=line, capsize=4,
                        label=wrap(name))
    ax1.set(title="decode (tg) tok/s vs depth", xlabel="context depth (tokens)", ylabel="tok/s")
    ax2.set(title="prefill (pp) tok/s vs depth", xlabel="context depth (tokens)", ylabel="tok/s")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.margins(x=0.08)
        ax.legend(fontsize=8)
    note = "mean ± std over the runs" + ("; two depths: points only, no trend line" if few else "")
    _titles(fig, title, f"{subtitle} · {note}" if subtitle else note)
    _save(fig, path)
    plt.close(fig)
    return True


def decode_plot(bars: list[Bar], anchors: list[Anchor], title: str, subtitle: str, path: Path) -> bool:
    """Bars of decode tok/s at depth 0, concurrency 1, per configuration (± std); external anchors
    hatched, drawn at the middle of their published range with the range as the error bar."""
    ext = [Bar(f"{a.stack} (external)", mid(a.tg32), (a.tg32[1] - a.tg32[0]) / 2 or None, text=a.tg_text)
           for a in anchors if a.tg32]
    return _bars(bars, ext, title, subtitle, "decode tok/s (depth 0, concurrency 1)", path, "{:.1f}")


def prefill_plot(bars: list[Bar], title: str, subtitle: str, path: Path) -> bool:
    """Bars of prefill tok/s at depth 0, concurrency 1, per configuration (± std)."""
    return _bars(bars, [], title, subtitle, "prefill tok/s (depth 0, concurrency 1)", path, "{:,.0f}")


def _bars(bars: list[Bar], ext: list[Bar], title: str, subtitle: str, xlabel: str, path: Path,
          fmt: str) -> bool:
    if not bars and not ext:
        return False
    plt = _plt()
    every = [*bars, *ext]
    labels = [wrap(b.label + (f" ({SHIPPED})" if b.shipped else "")) for b in every]
    height = sum(0.3 + 0.18 * label.count("\n") for label in labels)
    fig, ax = plt.subplots(figsize=(10, height + 2.0))
    ys = list(range(len(every)))
    for y, b, is_ext in zip(ys, every, [False] * len(bars) + [True] * len(ext), strict=True):
        color = "lightgray" if is_ext else ("tab:orange" if b.shipped else "tab:blue")
        ax.barh(y, b.value, color=color, hatch="//" if is_ext else "", edgecolor="black",
                linewidth=1.5 if b.shipped else 0.5, xerr=b.std or None, capsize=3)
        shown = b.text or fmt.format(b.value) + (f" ± {fmt.format(b.std)}" if b.std else "")
        ax.text(b.value + (b.std or 0), y, " " + shown, va="center", fontsize=8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.2)
    notes = (["mean ± std over the runs"] if bars else []) + \
        (["external: the published range (bar at its middle)"] if ext else [])
    note = "; ".join(notes)
    _titles(fig, title, f"{subtitle} · {note}" if subtitle else note)
    _save(fig, path)
    plt.close(fig)
    return True


# One colour per kernel class, in the breakdown's order (sparkserve_lab/trace/classify.CLASSES).
CLASS_COLOURS = ("tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:pink", "tab:green", "tab:olive",
                 "tab:cyan", "tab:brown", "gold", "lightgray")


@dataclass(frozen=True)
class StepBar:
    label: str
    class_us: dict[str, float]
    idle_us: float | None = None  # drawn as the last, hatched segment when given


def step_breakdown_plot(bars: list[StepBar], classes: tuple[str, ...], title: str, subtitle: str,
                        path: Path) -> bool:
    """Stacked horizontal bars: a decode step's GPU time per kernel class (us), then its idle time."""
    if not bars:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.55 * len(bars) + 1.2))
    ys = list(range(len(bars)))
    for y, b in zip(ys, bars, strict=True):
        left = 0.0
        for c, colour in zip(classes, CLASS_COLOURS, strict=False):
            v = float(b.class_us.get(c, 0.0))
            if v > 0:
                ax.barh(y, v, left=left, color=colour, edgecolor="black", linewidth=0.3,
                        label=c if y == 0 else None)
                left += v
        if b.idle_us:
            ax.barh(y, b.idle_us, left=left, color="white", hatch="//", edgecolor="gray", linewidth=0.3,
                    label="GPU idle (profiled)" if y == 0 else None)
            left += b.idle_us
        ax.text(left, y, f" {left:,.0f} us", va="center", fontsize=8)
    ax.set_yticks(ys, [wrap(b.label) for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="us per decode step (mean over the captured steps)")
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.12)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    _titles(fig, title, subtitle)
    _save(fig, path)
    plt.close(fig)
    return True


def concurrency_plot(series: dict[str, list[Row]], title: str, subtitle: str, path: Path) -> bool:
    """Aggregate and per-request decode tok/s and time to first response against concurrency (mean ±
    std over the runs), one line per configuration."""
    usable = {k: sorted(v, key=lambda r: r.concurrency) for k, v in series.items()
              if len({r.concurrency for r in v}) >= MIN_POINTS_FOR_A_LINE}
    if not usable:
        return False
    plt = _plt()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4.6))
    for name, rs in sorted(usable.items()):
        cs = [r.concurrency for r in rs]
        ax1.errorbar(cs, [r.tg_tps or 0 for r in rs], yerr=[r.tg_std or 0 for r in rs], marker="o",
                     capsize=3, label=wrap(name))
        ax2.plot(cs, [r.tg_req_tps or 0 for r in rs], marker="o", label=wrap(name))
        ax3.plot(cs, [(r.ttfr_ms or 0) / 1000 for r in rs], marker="o", label=wrap(name))
    ax1.set(title="aggregate decode tok/s", xlabel="concurrent requests", ylabel="tok/s")
    ax2.set(title="decode tok/s per request", xlabel="concurrent requests", ylabel="tok/s")
    ax3.set(title="time to first response", xlabel="concurrent requests", ylabel="s")
    for ax in (ax1, ax2, ax3):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r.concurrency for rs in usable.values() for r in rs}))
        ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    _titles(fig, title, f"{subtitle} · mean ± std over the runs" if subtitle else "mean ± std over the runs")
    _save(fig, path)
    plt.close(fig)
    return True


def speculative_plot(lines: dict[str, list[tuple[float, float]]], bases: dict[str, float], title: str,
                     subtitle: str, path: Path) -> bool:
    """Decode tok/s against the acceptance length, one line per k and configuration, and a dashed line at
    each configuration's tok/s without speculation."""
    if not lines:
        return False
    plt = _plt()
    # tall enough for the legend beside the axes (~0.13 inch a line of 7-point text)
    text_lines = sum(wrap(n).count("\n") + 1 for n in lines) + sum(
        wrap(f"no speculation · {n}").count("\n") + 1 for n in bases)
    fig, ax = plt.subplots(figsize=(12, max(5.2, 0.13 * text_lines + 1.6)))
    for name, pts in sorted(lines.items()):
        # markers at the measured ends only: the points between are the line's
        ax.plot([t for t, _ in pts], [v for _, v in pts], marker="o", markevery=[0, len(pts) - 1],
                label=wrap(name))
    # the baselines in the legend, not as labels on the plot: close values would print over each other
    styles = ["--", ":", "-."]
    for i, (name, v) in enumerate(sorted(bases.items())):
        ax.axhline(v, linestyle=styles[i % len(styles)], color="gray", linewidth=1,
                   label=wrap(f"no speculation · {name}"))
    ax.set(xlabel="acceptance length (tokens per step)", ylabel="decode tok/s, batch 1")
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    # beside the axes: one entry per k and configuration outgrows any corner of the plot
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    _titles(fig, title, subtitle)
    _save(fig, path)
    plt.close(fig)
    return True
