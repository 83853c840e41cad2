"""The report's sections on decode steps: the breakdown of `sparkserve profile decode` records (a table per
hardware and a stacked bar), the concurrency curve (level-4 runs of preset `concurrency`) and the GB10
estimate made from the shipped hopper profile's breakdown."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.serving.profiles import read_env_file
from sparkserve_lab.bench.results import Row, rows
from sparkserve_lab.report import plots
from sparkserve_lab.runstore import Run, Store, read_json
from sparkserve_lab.trace import estimate, record
from sparkserve_lab.trace.classify import CLASSES

CURVE_PRESET = "concurrency"
# The measured configuration the GB10 estimate starts from: the shipped hopper profile (all dense layers
# MXFP4 and Triton MoE as on the Spark profiles' byte budget; its kernels are not the Spark's).
ESTIMATE_FROM = "hopper-h100"
# vllm/0007's kernels by their Triton names, as a breakdown's kernel list holds them
GEMV_KERNELS = frozenset({"_gate_up_swiglu_kernel", "_down_combine_kernel"})
# ... and vllm/0010's routing in one launch beside them
NEW_STEP_KERNELS = GEMV_KERNELS | {"_bias_router_topk_kernel"}


def rel(path: Path, out: Path) -> str:
    """A record's path as a link from the report file `out`."""
    import os

    return os.path.relpath(path, out.parent)


def latest_profiles(store: Store, kind: str = record.KIND,
                    summary: str = record.SUMMARY) -> dict[tuple[str, str], Run]:
    """The latest record of `kind` (decode-profile) with its summary file per (hardware, configuration)."""
    out: dict[tuple[str, str], Run] = {}
    for r in store.records():
        if r.kind == kind and r.file(summary).exists():
            out[(r.hardware, str(r.metadata().get("configuration", "?")))] = r
    return out


def number(v: Any, digits: int = 0) -> str:
    """A table cell: the value with thousands separators, or - when there is none."""
    return "-" if v is None else f"{float(v):,.{digits}f}"


def breakdown_section(store: Store, out: Path, plot_dir: Path, rel_img: str, make_plots: bool) -> list[str]:
    L = ["## Decode-step breakdown (`sparkserve profile decode`)", ""]
    found = latest_profiles(store)
    if not found:
        return [*L, "None in the store.", ""]
    L += [
        "Each record profiles a running server's decode steps as served (CUDA graphs on; vLLM's torch "
        "profiler endpoints) at batch 1 and 32. Per step: GPU time per kernel class (mean over the captured "
        "decode steps; classes from `lab/configs/decode-kernel-classes.toml`), kernels, GPU idle (step "
        "period "
        "minus GPU busy time), the host's time in `execute_model`, and the step period. The profiler's "
        "own host overhead makes the steps longer than unprofiled ones: the period and idle columns are "
        "not the served rate (the curve below is); the kernel times are the kernels'.",
        "",
    ]
    by_hw: dict[str, list[tuple[str, Run]]] = {}
    for (hw, cfg), r in sorted(found.items()):
        by_hw.setdefault(hw, []).append((cfg, r))
    for hw, items in by_hw.items():
        cols = [(cfg, r, b, s) for cfg, r in items
                for b, s in sorted(record.summary(r.path)["batches"].items(), key=lambda kv: int(kv[0]))]
        L += [f"### {hw}", ""]
        L += [f"- {cfg}: [`{r.run_id}`]({rel(r.path, out)})"
              + (", random weights" if r.metadata().get("random_weights") else "") for cfg, r in items]
        L.append("")
        head = " | ".join(f"{cfg} b{b}" for cfg, _, b, _ in cols)
        L += [f"| us per decode step | {head} |", "|---|" + "---:|" * len(cols)]
        for c in CLASSES:
            L.append(f"| {c} | " + " | ".join(number(s["class_us"].get(c), 1) for *_, s in cols) + " |")
        L.append("| **GPU kernel time** | " + " | ".join(f"**{number(s['gpu_kernel_time_us'], 1)}**"
                                                       for *_, s in cols) + " |")
        for label, key in (("kernels per step", "kernels_per_step"), ("GPU idle per step (profiled)",
                           "gpu_idle_total_us"), ("host execute_model (profiled)", "host_execute_model_us"),
                           ("step period, median (profiled)", "step_period_us")):
            vals = [s[key]["median"] if isinstance(s[key], dict) else s[key] for *_, s in cols]
            L.append(f"| {label} | " + " | ".join(number(v, 1) for v in vals) + " |")
        L.append("| CUDA-graph launches per step | " + " | ".join(number(s["graph_launches_per_step"], 1)
                                                              for *_, s in cols) + " |")
        L.append("")
        notes = {str(s.get("load", {}).get("note")) for s in (record.summary(r.path) for _, r in items)
                 if s.get("load", {}).get("note")}
        L += [f"Note: {n}" for n in sorted(notes)] + ([""] if notes else [])
        shown = {r.run_id for _, r in items}
        earlier = [r for r in store.records(hw) if r.kind == record.KIND and r.run_id not in shown]
        if earlier:
            L += ["Earlier records (superseded by the ones above): " + ", ".join(
                f"[`{r.run_id}`]({rel(r.path, out)})" for r in earlier) + ".", ""]
        if make_plots:
            bars = [plots.StepBar(f"{cfg} batch {b}", s["class_us"], s.get("gpu_idle_total_us"))
                    for cfg, _, b, s in cols]
            name = f"{hw}-decode-step.png"
            if plots.step_breakdown_plot(bars, CLASSES, f"{hw}: where a decode step goes",
                                         "torch profiler, CUDA graphs on · random weights", plot_dir / name):
                L += [f"![{hw} decode-step breakdown]({rel_img}/{name})", ""]
    return L


def curve_section(store: Store, out: Path, plot_dir: Path, rel_img: str, make_plots: bool) -> list[str]:
    L = [f"## Concurrency curve (level 4, preset `{CURVE_PRESET}`)", ""]
    latest: dict[tuple[str, str], tuple[Run, list[Row]]] = {}
    for r in store.runs():
        meta = r.metadata()
        if (meta.get("preset") or {}).get("name") != CURVE_PRESET or r.status() == "invalid":
            continue
        b = r.bench()
        rs = rows(b, r.batches()) if b else []
        key = (r.hardware, str(meta.get("configuration", "?")))
        # the newest of the widest: an A/B over a few concurrencies does not hide a whole curve
        if rs and (key not in latest or len({x.concurrency for x in rs})
                   >= len({x.concurrency for x in latest[key][1]})):
            latest[key] = (r, rs)
    if not latest:
        return [*L, "None in the store.", ""]
    L += ["pp512/tg128 at c = 1, 2, 4, 5, 8, 10, 16, 32, 64 (llama-benchy; aggregate = decode tokens of all "
          "requests per second, per request = each request's own rate; ttfr = time to first response, "
          "queueing included; end to end = the tokens a batch generated over its wall time, for runs "
          "that kept llama-benchy's progress events); mean ± std over the runs. Per configuration the "
          "newest run with the most "
          "concurrencies (an A/B's runs over a few of them show only where no whole curve is stored).", ""]
    hws = sorted({hw for hw, _ in latest})
    for hw in hws:
        items = sorted((cfg, v) for (h, cfg), v in latest.items() if h == hw)
        L += [f"### {hw}", ""]
        L += [f"- {cfg}: [`{r.run_id}`]({rel(r.path, out)}), {r.status()}" for cfg, (r, _) in items]
        head = " | ".join(f"{cfg} aggregate | per request | ttfr ms | end to end" for cfg, _ in items)
        L += ["", f"| c | {head} |",
              "|---:|" + "---:|---:|---:|---:|" * len(items)]
        cs = sorted({x.concurrency for _, (_, rs) in items for x in rs})
        for c in cs:
            cells = []
            for _, (_, rs) in items:
                row = next((x for x in rs if x.concurrency == c), None)
                cells += ([f"{number(row.tg_tps, 1)} ± {number(row.tg_std, 1)}", number(row.tg_req_tps, 1),
                           number(row.ttfr_ms), number(row.e2e_tps, 1)] if row else ["-", "-", "-", "-"])
            L.append(f"| {c} | " + " | ".join(cells) + " |")
        L.append("")
        if make_plots:
            name = f"{hw}-concurrency.png"
            series = {cfg: rs for cfg, (_, rs) in items}
            if plots.concurrency_plot(series, f"{hw}: the concurrency curve (pp512/tg128)", "random weights",
                                      plot_dir / name):
                L += [f"![{hw} concurrency curve]({rel_img}/{name})", ""]
    return L


def spark_profiles(repo: Path) -> dict[str, dict[str, str]]:
    out = {}
    for p in sorted((repo / "profiles").glob("spark*.env")):
        out[p.stem] = read_env_file(p)
    return out


def estimate_section(store: Store, repo: Path) -> list[str]:
    L = ["## GB10 decode estimate (an estimate, not a measurement)", ""]
    src = next((r for (hw, cfg), r in sorted(latest_profiles(store).items()) if cfg == ESTIMATE_FROM
                and "h100" in hw), None)
    inputs = estimate.load(repo / estimate.DEFAULT_FILE)
    if src is None:
        return [*L, f"No `{ESTIMATE_FROM}` breakdown on an H100 in the store to start from.", "",
                *_gemv_step_section(store, repo, inputs)]
    data = record.summary(src.path)
    context = int(data.get("tokens_per_request") or 64)
    L += [
        f"From the H100 breakdown of `{ESTIMATE_FROM}` ([`{src.run_id}`](../{src.path.relative_to(repo)})): "
        "per kernel class, the bytes it must read at the GB10's bandwidth plus the H100 time it took beyond "
        f"its own byte time at {inputs.measured_gpu_gbs:,.0f} GB/s "
        f"({inputs.sources.get('h100_nominal_source')}),"
        " summed. Assumed: weights read once per step, MoE experts hit uniformly (a batch of 32 reads "
        f"{estimate.experts_hit(32, 128, 4):.1f} of 128 experts per layer), KV cache at a context of "
        f"{context} tokens, the H100's non-byte time carried over unchanged (optimistic: a GB10 has far less "
        "compute), gaps between kernels and host time left out. Bandwidths: "
        f"{inputs.gb10_nominal_gbs:.0f} GB/s nominal ({inputs.sources.get('gb10_nominal_source')}) and "
        f"{inputs.gb10_measured_gbs:.0f} GB/s measured by others "
        f"({inputs.sources.get('gb10_measured_source')}). "
        "Inputs: `lab/configs/gb10-estimate.toml`; model: `lab/src/sparkserve_lab/trace/estimate.py`.",
        "",
    ]
    L += _estimate_table(inputs, data, context, spark_profiles(repo), inputs.measured_gpu_gbs)
    L += ["", "Uniform routing is the most bytes a batch can read: at batch 32 it is an upper bound on the "
          "MoE's bytes, and real text, whose routing is skewed, reads fewer experts. Published single-Spark "
          "numbers for comparison (external, not measured here): one user 57.5-59.5 tok/s "
          "(`lab/configs/external-anchors.toml`) and 60.7 tok/s (eugr/spark-vllm-docker#345); a solo-Spark "
          "vLLM "
          "curve of 318.7 tok/s aggregate at c=32 (kubis.ai topology benchmark, enforce-eager, FP8 KV), "
          "which means a step of at most about 100 ms there: fewer bytes per step than uniform routing.", ""]
    return L + _gemv_step_section(store, repo, inputs)


def _estimate_table(inputs: estimate.Inputs, data: dict[str, Any], context: int,
                    profiles: dict[str, dict[str, str]], measured_gbs: float, suffix: str = "") -> list[str]:
    """The estimate's table: a row per Spark profile and measured batch, its bytes and the estimate at
    both GB10 bandwidths."""
    out = ["| Spark profile | batch | bytes per step | estimate at nominal | estimate at measured BW | "
           "of which bytes (measured BW) |", "|---|---:|---:|---:|---:|---:|"]
    for name, env in profiles.items():
        layers = {x.strip() for x in env.get("MXFP4_LAYERS", "moe").split(",")}
        kv_bytes = 1.0 if env.get("KV_CACHE_DTYPE", "auto").startswith("fp8") else 2.0
        for b, s in sorted(data["batches"].items(), key=lambda kv: int(kv[0])):
            nom = estimate.estimate(inputs, s["class_us"], int(b), context, layers, kv_bytes,
                                    inputs.gb10_nominal_gbs, measured_gbs)
            mea = estimate.estimate(inputs, s["class_us"], int(b), context, layers, kv_bytes,
                                    inputs.gb10_measured_gbs, measured_gbs)
            byte_us = mea["bytes_total"] / (inputs.gb10_measured_gbs * 1e3)
            out.append(f"| {name}{suffix} | {b} | {mea['bytes_total'] / 1e9:.2f} GB | "
                       f"{nom['step_us'] / 1000:.2f} ms = {nom['tok_s_per_user']:.1f} tok/s per user | "
                       f"{mea['step_us'] / 1000:.2f} ms = {mea['tok_s_per_user']:.1f} tok/s per user "
                       f"({mea['tok_s_aggregate']:.0f} aggregate) | {byte_us / 1000:.2f} ms |")
    return out


def _serves(run: Run, kernels: frozenset[str]) -> bool:
    """The breakdown ran all of `kernels` (its record keeps the kernels by name)."""
    for f in sorted(run.path.glob("kernels-b*.json")):
        names = {str(k.get("name", "")) for k in read_json(f)}
        if names >= kernels:
            return True
    return False


@dataclass(frozen=True)
class StepEstimate:
    """An estimate from the latest breakdown of `ESTIMATE_FROM` (with overrides) on `hardware` that ran
    `kernels`: its byte times taken off at `gbs` (the GPU's nominal bandwidth, named by `gbs_source`)."""

    title: str
    hardware: str
    kernels: frozenset[str]
    named: str  # the kernels, in words
    served: str  # what the breakdown's step is
    suffix: str  # after the Spark profile's name in the table
    gbs: float
    gbs_source: str


def _step_estimates(inputs: estimate.Inputs) -> list[StepEstimate]:
    return [
        StepEstimate("The step with vllm/0007's MoE kernels (`MOE_BACKEND=marlin-gemv`)", "h200",
                     GEMV_KERNELS, "vllm/0007's kernels",
                     "whose MoE GEMMs are vllm/0007's two kernels", " + marlin-gemv",
                     inputs.h200_gbs, inputs.sources.get("h200_nominal_source", "")),
        StepEstimate("The step with vllm/0010's routing in one launch (`VLLM_ROUTER_GEMV_TOPK=1`)", "h100",
                     NEW_STEP_KERNELS, "vllm/0010's routing beside vllm/0007's kernels",
                     "whose MoE GEMMs are vllm/0007's two kernels with vllm/0009's K loop "
                     "and whose routing is vllm/0010's one kernel", " + marlin-gemv + router top-k",
                     inputs.measured_gpu_gbs, inputs.sources.get("h100_nominal_source", "")),
    ]


def _step_section(store: Store, repo: Path, inputs: estimate.Inputs, what: StepEstimate) -> list[str]:
    """The same estimate from the breakdown of another step (`what`)."""
    L = [f"### {what.title}", ""]
    found = [r for r in store.records()  # oldest first
             if r.kind == record.KIND and r.file(record.SUMMARY).exists() and what.hardware in r.hardware
             and str(r.metadata().get("configuration", "")).split("+")[0] == ESTIMATE_FROM
             and _serves(r, what.kernels)]
    src = found[-1] if found else None
    if src is None:
        return [*L, f"No `{ESTIMATE_FROM}` breakdown on an {what.hardware.upper()} with {what.named} in the "
                    "store.", ""]
    data = record.summary(src.path)
    context = int(data.get("tokens_per_request") or 64)
    L += [
        f"From the {what.hardware.upper()} breakdown of `{src.metadata().get('configuration')}` "
        f"([`{src.run_id}`](../{src.path.relative_to(repo)})), {what.served}: the same model, each class's "
        f"byte time taken off at {what.gbs:,.0f} GB/s ({what.gbs_source}). The Spark profiles serve "
        "FlashInfer's CUTLASS MXFP8 MoE; these rows are what the model gives them with these kernels "
        "(compiled for sm_121a in CI, unmeasured on a GB10: the owner's A/B of docs/FEATURE_MATRIX.md "
        "decides).",
        "",
    ]
    L += _estimate_table(inputs, data, context, spark_profiles(repo), what.gbs, what.suffix)
    return [*L, ""]


def _gemv_step_section(store: Store, repo: Path, inputs: estimate.Inputs) -> list[str]:
    """The estimates from the breakdowns of the steps with the series' own decode kernels."""
    return [line for what in _step_estimates(inputs) for line in _step_section(store, repo, inputs, what)]
