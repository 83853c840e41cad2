"""The two GPU verbs end to end: pick the backend (GPU or CPU dry run), open the run-store record, run,
write the artifacts, install the table when asked, close the record with the verdict."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.serving.moe import state
from sparkserve.serving.moe import table as tables
from sparkserve.serving.moe.shape import MoeShape
from sparkserve_lab.moe import backend as backends
from sparkserve_lab.moe import install as installer
from sparkserve_lab.moe import record, sweep, validate, weights
from sparkserve_lab.moe.record import flashinfer_site
from sparkserve_lab.runstore import Store

MODULE_STATUS = "flashinfer-module.json"


@dataclass(frozen=True)
class Target:
    shape: MoeShape
    activation: str | None = None  # None: what the GPU runs
    device_index: int = 0
    dry_run_path: str | None = None  # set: rehearse this path on the CPU
    dry_run_experts: int = 8


@dataclass(frozen=True)
class Output:
    store: Path
    root: Path
    hardware: str | None
    command: tuple[str, ...]


def make_backend(t: Target) -> backends.Backend:
    if t.dry_run_path:
        from sparkserve_lab.moe.dryrun import DryRunBackend

        n = min(t.dry_run_experts, t.shape.experts)
        shape = replace(t.shape, experts=n, model=f"{t.shape.model} [dry run: {n} experts]")
        return DryRunBackend(shape, t.dry_run_path)
    return backends.GpuBackend(t.shape, t.activation, t.device_index)


def _load(b: backends.Backend, seed: int, rec: record.Record) -> None:
    status = b.module_status()
    say(f"FlashInfer module {status.get('module')}: {status['state']}")
    (rec.path / MODULE_STATUS).write_text(json.dumps(status, indent=2) + "\n")
    say(f"making {b.shape.experts} MXFP4 experts ({b.shape.describe()}), seed {seed}")
    b.load(weights.random_experts(b.shape, seed=seed))


def _flashinfer_version() -> str:
    import importlib.metadata as md

    try:
        return md.version("flashinfer-python")
    except md.PackageNotFoundError:
        return "not installed"


def run_sweep(t: Target, cfg: sweep.Config, out: Output, install_to: Path | None) -> tuple[bool, Path]:
    b = make_backend(t)
    name = f"moe-sweep-{b.path}" + ("-dry-run" if b.device.simulated else "")
    rec = record.open_record(Store(out.store), out.root, record.KIND_SWEEP, name, out.hardware,
                             list(out.command))
    say(f"moe sweep: {b.device.name} (compute capability {b.device.compute_capability}), path {b.path}; "
        f"record {rec.path}")
    if b.device.simulated:
        say("CPU DRY RUN: the reference stands in for the kernel and timings are synthetic")
    _load(b, cfg.seed, rec)
    s = sweep.Sweep(b, cfg, rec.path, say)
    results, space = s.run()
    ok, problems = sweep.verdict(results)
    summary = sweep.summary(results, space, b, cfg, s.tol, ok, problems)
    rec.file(sweep.SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    build = tables.Build(_flashinfer_version(), state.flashinfer_patches(flashinfer_site()), b.path,
                         space.counts, b.device.compute_capability)
    measurement = {"cuda_graphs": not b.device.simulated, "synthetic": b.device.simulated,
                   "rotation": [r.rotation for r in results], "timings": summary["timings"],
                   "tolerance_rel_l2": s.tol, "tactic_list": summary["tactics"]["variant"]}
    table = sweep.make_table(results, space, b, build, measurement,
                             {"record": str(rec.path), "command": list(out.command)})
    table_file = tables.write(table, rec.file(tables.FILE_NAME)) if table.entries else None
    print(f"moe sweep {'PASS' if ok else 'FAIL'}: {b.path} on {b.device.name}"
          + (" (CPU dry run, synthetic timings)" if b.device.simulated else ""))
    for line in table.describe():
        print(f"  {line}")
    for p in problems:
        print(f"FAIL {p}")
    installed = None
    if install_to is not None:
        if not ok or table_file is None:
            print("not installed: the sweep failed")
        else:
            installed = installer.install(table_file, install_to, b.shape, b.device.compute_capability,
                                          allow_synthetic=b.device.simulated)
            print(f"installed {installed} (MOE_TACTICS=table starts with it)")
    record.close_record(rec, ok, {"path": b.path, "table": table_file.name if table_file else None,
                                  "installed": str(installed) if installed else None,
                                  "simulated": b.device.simulated})
    print(rec.path)
    return ok, rec.path


def run_validate(t: Target, tokens: tuple[int, ...], seed: int, all_tactics: bool, tolerance: float | None,
                 out: Output) -> tuple[bool, Path]:
    b = make_backend(t)
    name = f"validate-moe-{b.path}" + ("-dry-run" if b.device.simulated else "")
    rec = record.open_record(Store(out.store), out.root, record.KIND_VALIDATE, name, out.hardware,
                             list(out.command))
    say(f"validate moe: {b.device.name} (compute capability {b.device.compute_capability}), path {b.path}; "
        f"record {rec.path}")
    _load(b, seed, rec)
    ok, result = validate.run(b, tokens, seed, all_tactics, tolerance, rec.path, say)
    s = result["summary"]
    dry = " (CPU dry run: the reference stood in for the kernel)" if b.device.simulated else ""
    print(f"validate moe {'PASS' if ok else 'FAIL'}: {b.path} on {b.device.name}: "
          f"{s['correct']}/{s['checks']} agree with the reference (rel L2 <= {result['tolerance_rel_l2']}), "
          f"{s['wrong']} disagree, {s['errors']} raised{dry}")
    record.close_record(rec, ok, {"path": b.path, "simulated": b.device.simulated})
    print(rec.path)
    return ok, rec.path


def install_table(ref: str, store: Path, dest: Path, shape: MoeShape, compute_capability: str | None) -> Path:
    table_file = record.find_table(Store(store), ref)
    if not table_file.is_file():
        raise SparkserveError(f"{ref}: no {tables.FILE_NAME} there (a failed sweep writes none)")
    return installer.install(table_file, dest, shape, compute_capability)


def gpu_compute_capability() -> str | None:
    """The CC of GPU 0 without torch (driver API), or None."""
    from sparkserve.serving import gpu

    try:
        return gpu.visible_gpus()[0].cc
    except gpu.NoGpu:
        return None

