"""The report's section on what speculative decoding costs: every stored `speculative cost` record, its
step-time line per k (zero and full acceptance), the break-even acceptance length, decode tok/s against the
acceptance length (a plot per hardware), and the estimates from the drafts' published acceptance lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab.report.decode import rel
from sparkserve_lab.runstore import Run, Store, read_json
from sparkserve_lab.speculative import cost
from sparkserve_lab.speculative.recheck import RECHECK
from sparkserve_lab.speculative.runs import KIND_COST

# The profile values that decide a step's kernels, named with each record (a profile's defaults change).
SHOWN = ("MXFP4_LAYERS", "MOE_BACKEND")


def _configuration(meta: dict[str, Any], speculation: bool = True) -> str:
    """The profile and the overrides besides the draft's folder (a path on the host that ran it), then
    the values of SHOWN that the record served; without the speculative ones for its run without."""
    over = {k: v for k, v in (meta.get("overrides") or {}).items()
            if k != "SPECULATIVE_DRAFT" and (speculation or not k.startswith("SPECULATIVE"))}
    text = str(meta.get("profile", "?")) + "".join(f" {k}={v}" for k, v in sorted(over.items()))
    recorded = meta.get("profile_env")
    env: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    served = [f"{k}={over.get(k, env[k])}" for k in SHOWN if k in env]
    return text + (f" (served: {', '.join(served)})" if served else "")


def table_of(run: Run) -> list[cost.Cost]:
    points = [cost.Point(int(p["k"]), str(p["mode"]), float(p["tok_s"]), float(p["acceptance_length"]))
              for p in run.metadata().get("points") or []]
    return cost.costs(points)


def valid(run: Run) -> bool:
    """Valid by level 1.5: the newest judgement, `speculative recheck`'s (recheck.json) where one was made
    after the rules changed, else the record's own."""
    again = run.file(RECHECK)
    if again.exists():
        return bool(read_json(again).get("ok"))
    return run.metadata().get("valid") is not False


def records(store: Store) -> list[tuple[Run, list[cost.Cost]]]:
    """Valid cost records whose points draw a table, oldest first per hardware (a record without a run
    without speculation, or one an engine start made invalid, has no table)."""
    out = []
    for r in store.records():
        if r.kind != KIND_COST or not valid(r):
            continue
        try:
            table = table_of(r)
        except (SparkserveError, KeyError, TypeError, ValueError):
            continue
        if table:
            out.append((r, table))
    return out


def section(store: Store, out: Path, plot_dir: Path, rel_img: str, make_plots: bool) -> list[str]:
    L = ["## Speculative decoding: what a step costs (`sparkserve speculative cost`)", ""]
    found = records(store)
    if not found:
        return [*L, "None in the store.", ""]
    L += ["Batch-1 decode with a random-weight target and draft: the draft's tokens are all rejected (zero "
          "acceptance) or all accepted by vLLM's synthetic rejection sampling (full acceptance, measurement "
          "only: the text is not the model's). Step time is linear in the acceptance length tau between the "
          "two; break-even is the tau at which speculation with that k is as fast as none (each record's own "
          "run without speculation). tok/s at other tau values and the estimates below are computed from "
          "those two ends, not measured.", ""]
    for hw in sorted({r.hardware for r, _ in found}):
        mine = [(r, t) for r, t in found if r.hardware == hw]
        L += [f"### {hw}", "",
              "| record | configuration | k | no speculation, tok/s | step at zero acceptance, ms | "
              "step at full acceptance, ms | break-even tau | tok/s at tau = 1 .. k+1 |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
        lines: dict[str, list[tuple[float, float]]] = {}
        bases: dict[str, float] = {}
        for r, table in mine:
            meta = r.metadata()
            cfg = _configuration(meta)
            again = " (valid on recheck)" if r.file(RECHECK).exists() else ""
            link = f"[`{r.run_id}`]({rel(r.path, out)}){again}"
            bases[_configuration(meta, speculation=False)] = 1 / table[0].t_base  # one baseline a record
            for c in table:
                full = "-" if c.t1 is None else f"{c.t1 * 1e3:.2f}"
                be = c.break_even()
                taus = [float(t) for t in range(1, c.k + 2)]
                L.append(f"| {link} | {cfg} | {c.k} | "
                         f"{1 / c.t_base:.1f} | {c.t0 * 1e3:.2f} | {full} | "
                         f"{'never' if be is None else f'{be:.2f}'} | "
                         + ", ".join(f"{c.tok_s(t):.0f}" for t in taus) + " |")
                lines[f"k={c.k} · {cfg}"] = [(t, c.tok_s(t)) for t in taus]
        L.append("")
        for r, table in mine:
            for row in cost.estimates(table):
                est = row["estimate"]
                if est:
                    L.append(f"- Estimate, not a measurement ([`{r.run_id}`]({rel(r.path, out)})): "
                             f"{row['draft']} (published acceptance length {row['acceptance_length']} at "
                             f"k={row['k']}, {row['where']}): {est['tok_s']:.1f} tok/s, "
                             f"x{est['speedup']:.2f}.")
        L.append("")
        if make_plots:
            from sparkserve_lab.report import plots

            name = f"{hw}-speculative.png"
            if plots.speculative_plot(lines, bases, f"{hw}: batch-1 decode against acceptance length",
                                      "random weights · lines between the measured ends", plot_dir / name):
                L += [f"![{hw} speculative decoding cost]({rel_img}/{name})", ""]
    return L
