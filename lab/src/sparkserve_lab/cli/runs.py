"""Verbs of the run store: `baseline set`, `metadata`, `proof run`, `report`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, path_arg, root
from sparkserve_lab.cli.common import DEFAULT_STORE


def cmd_metadata(a: argparse.Namespace) -> int:
    from sparkserve_lab import metadata

    rec = metadata.collect(
        root=root(),
        configuration=a.configuration,
        base_url=a.base_url,
        server_pid=a.server_pid,
        serve_python=a.serve_python,
        hardware=a.hardware,
    )
    text = json.dumps(rec, indent=2, default=str) + "\n"
    if a.out:
        Path(a.out).write_text(text)
        print(a.out)
    else:
        print(text, end="")
    return OK


def cmd_baseline_set(a: argparse.Namespace) -> int:
    from sparkserve_lab.runstore import Store

    store = Store(path_arg(a, "store", DEFAULT_STORE))
    run = store.get(a.run)
    store.set_baseline(run)
    print(f"{run.hardware}/{run.configuration}: {run.run_id}")
    return OK


def cmd_report(a: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from sparkserve.errors import SparkserveError
    from sparkserve.progress import say
    from sparkserve_lab.report import documents, guard
    from sparkserve_lab.runstore import Store

    repo = root()
    store = Store(path_arg(a, "store", DEFAULT_STORE))
    out = Path(a.out) if a.out else repo / "docs" / "BENCHMARK_RESULTS.md"
    img = Path(a.img_dir) if a.img_dir else out.parent / "img" / "benchmarks"
    with tempfile.TemporaryDirectory(prefix="sparkserve-report-") as stage:
        texts = documents.render(repo, store, out, img, a.anchors or None,
                                 Path(a.rules) if a.rules else None, not a.no_plots, Path(stage))
        lost = {p: guard.dropped(p.read_text(), t) for p, t in texts.items() if p.is_file()}
        lost = {p: d for p, d in lost.items() if d}
        listing = "; ".join(f"{p}: {', '.join(d)}" for p, d in lost.items())
        if lost and not a.allow_dropped:
            raise SparkserveError(
                f"the regenerated report would drop what the current files have ({listing}); nothing was "
                "written. A missing store, anchors file or run? Check --store/--anchors; to drop them on "
                "purpose, pass --allow-dropped")
        for p, t in texts.items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(t)
            print(p)
        staged = sorted(Path(stage).glob("*.png"))
        if staged:
            img.mkdir(parents=True, exist_ok=True)
        for png in staged:
            shutil.copyfile(png, img / png.name)
            print(img / png.name)
    if lost:
        say(f"report: dropped on request (--allow-dropped): {listing}")
    return OK


def cmd_proof_run(a: argparse.Namespace) -> int:
    from sparkserve_lab import proofs
    from sparkserve_lab.provenance import series_now
    from sparkserve_lab.runstore import Store

    repo = root()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    proofs.check_proves(a.proves or [], series_now(repo))
    _, rc = proofs.run(Store(path_arg(a, "store", DEFAULT_STORE)), repo, a.name, a.proves, command,
                       a.python, a.hardware, a.measurement)
    return OK if rc == 0 else FAILED


def cmd_proof_upstream_tests(a: argparse.Namespace) -> int:
    import contextlib
    import json
    import tempfile

    from sparkserve.errors import SparkserveError
    from sparkserve.supply import pins, sources, sourcetree
    from sparkserve.supply.patches import apply
    from sparkserve.supply.patches.series import load_series
    from sparkserve_lab import proofs, upstream_tests

    p = pins.load()
    names = a.upstream or ["vllm", "flashinfer"]
    if a.tree and len(names) != 1:
        raise SparkserveError("--tree needs exactly one --upstream")
    if bool(a.tests_from) != bool(a.tests_version) or (a.tests_from and len(names) != 1):
        raise SparkserveError("--tests-from needs --tests-version (the version of those tests) and exactly "
                              "one --upstream")
    if not a.site and not a.list:
        raise SparkserveError("give --site (the patched site-packages), or --list for the selection alone")
    site = Path(a.site).resolve() if a.site else Path()
    reports: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sparkserve-upstream-tests-") as tmp:
        for name in names:
            series = load_series(p.root, name)
            if a.tree:
                tree = Path(a.tree).resolve()
            else:  # the tree `patches check` builds: the pinned sdist, the series as commits
                tree = sourcetree.make(sources.fetch(p, name), Path(tmp) / name, p.upstream(name))
                apply.apply_tree(p, tree, name, series)
            with (upstream_tests.borrowed_tests(tree, Path(a.tests_from).resolve(), a.tests_version,
                                                p.upstream(name).version)
                  if a.tests_from else contextlib.nullcontext()) as borrowed:
                report = _upstream_tests(a, name, tree, site, series, Path(tmp))
            if report is not None:
                reports[name] = report | ({"borrowed_tests": borrowed.to_dict()} if borrowed else {})
    out = proofs.artifact_path(a.out, "upstream-tests.json")
    if out:
        out.write_text(json.dumps(reports, indent=2) + "\n")
        print(f"-> {out}")
    return FAILED if any(r["flips_not_carried"] for r in reports.values()) else OK


def _upstream_tests(a: argparse.Namespace, name: str, tree: Path, site: Path, series: Any,
                    tmp: Path) -> dict[str, Any] | None:
    """One upstream's selection (--list: printed, None) or both states' report."""
    import json

    from sparkserve.errors import SparkserveError
    from sparkserve_lab import gzfile, upstream_tests

    if a.list:
        changed = sorted({fc.path for patch in series for fc in patch.files})
        sel = upstream_tests.selection(tree, changed, a.skip_changed or ())
        selected, unruled = sel.tests, sel.unruled
        if a.subset:
            selected = upstream_tests.restrict(selected, a.subset, name)
        for path, tests in selected.items():
            print(f"{name} {path}: {len(tests)} test file(s) [{'; '.join(sel.rules[path])}]"
                  + "".join(f"\n  {t}  ({sel.why[path][t]})" for t in tests))
        every = {t for tests in selected.values() for t in tests}
        print(f"{name}: {len(every)} test file(s) for {len(changed)} changed file(s)"
              + (f"; no selection rule for {', '.join(unruled)}" if unruled else ""))
        return None
    work = tmp / f"{name}-junit"
    work.mkdir()
    state_s = a.state_minutes * 60 if a.state_minutes else None
    if a.states_together and not a.jobs:
        raise SparkserveError("--states-together runs files side by side: give --jobs too")
    pace = (upstream_tests.Pace(a.jobs, a.file_timeout, state_s, a.state_dir_var, a.states_together)
            if a.jobs else None)
    resume = None
    if a.resume:
        earlier = Path(a.resume)
        report_file = gzfile.existing(earlier / "upstream-tests.json") if earlier.is_dir() else earlier
        if not report_file.is_file():
            raise SparkserveError(f"--resume {a.resume}: no upstream-tests.json there")
        by_name = json.loads(gzfile.read_text(report_file))
        if name not in by_name:
            raise SparkserveError(f"--resume {a.resume}: that run has no {name} report")
        resume = (by_name[name], earlier.name if earlier.is_dir() else earlier.parent.name)
    rep = upstream_tests.run(tree, site, series, a.python, work, a.skip_changed or (), a.subset, pace,
                             resume, a.preflight)
    report: dict[str, Any] = rep.to_dict()
    print(f"{name}: {report['tests']} test(s) from "
          f"{len({t for ts in rep.selected.values() for t in ts})} file(s); "
          f"{len(rep.flips)} changed outcome(s), {len(rep.failures)} not carried by the series; "
          f"{len(rep.environmental)} failing in both states")
    for f in rep.flips:
        what = "FLIP" if not f["carried"] else "flip (the series changes this test)"
        print(f"  {what} {f['test']}: {f['unpatched']} -> {f['patched']}")
    for e in rep.environmental:
        print(f"  both {e['outcome']}: {e['test']}: {e['reason']}")
    for path in rep.unruled:
        print(f"  no selection rule for {path}")
    for path, why in rep.partial.items():
        print(f"  in part {path}: {why}")
    for path, why in rep.left_out.items():
        print(f"  left out {path}: {why}")
    return report


def register(sub: Any) -> None:
    bl = sub.add_parser("baseline", help="level-5 baselines").add_subparsers(dest="what", required=True)
    sp = bl.add_parser("set", help="make RUN the baseline of its hardware and configuration")
    sp.add_argument("run")
    sp.add_argument("--store")
    sp.set_defaults(func=cmd_baseline_set)

    sp = sub.add_parser("report", help="docs/BENCHMARK_RESULTS.md, docs/PROOFS.md and plots from the store")
    sp.add_argument("--store", help=f"default: <repo>/{DEFAULT_STORE}")
    sp.add_argument("--out", help="default: <repo>/docs/BENCHMARK_RESULTS.md")
    sp.add_argument("--img-dir", help="default: <out dir>/img/benchmarks")
    sp.add_argument("--anchors", help="default: <repo>/configs/external-anchors.toml")
    sp.add_argument("--rules",
                    help="what configuration names mean (default: lab/configs/engine-kernels.toml)")
    sp.add_argument("--no-plots", action="store_true", help="no PNGs (the report says where they would be)")
    sp.add_argument("--allow-dropped", action="store_true",
                    help="write even if a section or figure of the current files would disappear")
    sp.set_defaults(func=cmd_report)
    sp = sub.add_parser("metadata", help="print (or --out) the metadata record of this host/server")
    sp.add_argument("--configuration", default="unknown")
    sp.add_argument("--base-url")
    sp.add_argument("--server-pid", type=int)
    sp.add_argument("--serve-python")
    sp.add_argument("--hardware")
    sp.add_argument("--out")
    sp.set_defaults(func=cmd_metadata, json_data=True)  # its record is JSON with or without --json

    pr = sub.add_parser("proof", help="proofs into the run store").add_subparsers(dest="what", required=True)
    sp = pr.add_parser("run", help="run a proving command; its output, artifacts and verdict become a record")
    sp.add_argument("--name", required=True, help="what is proven, e.g. lm-head-numerics")
    sp.add_argument("--proves", action="append", help="upstream/patch-id the proof is about (repeatable)")
    sp.add_argument("--python", default=sys.executable,
                    help="the Python of the stack under test (its patch manifest is recorded)")
    sp.add_argument("--store", help=f"default: <repo>/{DEFAULT_STORE}")
    sp.add_argument("--hardware", help="lab/results/<hardware>/ label (default: detected GPU)")
    sp.add_argument("--measurement", action="store_true",
                    help="the command times (kind measurement: verdict 'measured' or 'fail', never 'pass')")
    sp.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    sp.set_defaults(func=cmd_proof_run)
    sp = pr.add_parser("upstream-tests", help="upstream's own tests of the changed modules, unpatched then "
                                              "patched: every changed outcome")
    sp.add_argument("--site", help="site-packages with the series applied (reverted and put back while it "
                                   "runs)")
    sp.add_argument("--list", action="store_true", help="print the test files selected per changed file, "
                                                        "run nothing")
    sp.add_argument("--upstream", action="append", choices=["vllm", "flashinfer"])
    sp.add_argument("--tree", help="a dev tree with the series applied (default: made from the pinned sdist)")
    sp.add_argument("--python", default=sys.executable, help="runs pytest with the site on its path")
    sp.add_argument("--skip-changed", action="append", metavar="PATH",
                    help="a changed file whose importing tests are not selected (e.g. vllm/envs.py)")
    sp.add_argument("--subset", choices=sorted(upstream_tests_subsets()),
                    help="only the selected test files of this named subset of --upstream (vllm cpu: what CI "
                         "runs in the image; vllm gpu: a GPU host's)")
    sp.add_argument("--jobs", type=int, help="one pytest per test file, this many at a time (a GPU host's "
                    "whole selection); a file's crash is its own; default: one pytest for all files")
    sp.add_argument("--file-timeout", type=float, default=300.0,
                    help="with --jobs: seconds after which a file is stopped; the tests both states got "
                         "through are compared (300)")
    sp.add_argument("--resume", metavar="RECORD",
                    help="an earlier run's record (or its upstream-tests.json): the files it compared "
                         "without a changed outcome are left out, the rest run (sittings of bounded length "
                         "cover the whole selection between them)")
    sp.add_argument("--state-minutes", type=float,
                    help="with --jobs: files of a state not started within this many minutes are left out "
                         "(recorded)")
    sp.add_argument("--state-dir-var", metavar="NAME",
                    help="with --jobs: set NAME to a folder of each state's own (FLASHINFER_WORKSPACE_BASE: "
                         "the reverted kernels' JIT builds stay apart from the patched ones')")
    sp.add_argument("--states-together", action="store_true",
                    help="with --jobs: both states at once, --jobs files each (the unpatched one against a "
                         "reverted copy of the changed packages and a second checkout of the tree): about "
                         "half the wall time where the host holds both")
    sp.add_argument("--preflight", metavar="CODE",
                    help="Python code each state runs first in its tests' environment (one FlashInfer JIT "
                         "build: a host whose toolchain cannot build fails at once, with the compiler's "
                         "output, instead of in every test)")
    sp.add_argument("--tests-from", metavar="DIR",
                    help="a checkout of another version of the upstream whose tests/ files the run borrows "
                         "(those the tree lacks), for a pinned source that ships none of the patched code's "
                         "(FlashInfer's sdist); needs --tests-version")
    sp.add_argument("--tests-version", metavar="V",
                    help="the version of --tests-from's tests (recorded beside the pinned one)")
    sp.add_argument("--out", help="JSON report (default under `proof run`: its folder/upstream-tests.json)")
    sp.set_defaults(func=cmd_proof_upstream_tests)


def upstream_tests_subsets() -> list[str]:
    from sparkserve_lab.upstream_tests import SUBSETS

    return sorted({name for by in SUBSETS.values() for name in by})
