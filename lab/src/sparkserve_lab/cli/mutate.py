"""`mutate`: does every hunk of the patch series have a test that fails without it?

    sparkserve-lab mutate [upstream/NNNN ...] --site DIR | --tree DIR [--hunk FILE:LINE] [--fork]
        reverts each hunk alone in the patched site (or dev tree), runs the patch's Proof tests, puts the
        hunk back: caught (a test failed) or survived (none did); fails when a hunk survived
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK
from sparkserve.cli.supply import UPSTREAMS
from sparkserve.errors import SparkserveError
from sparkserve.supply import pins
from sparkserve.supply.patches.series import load_series


def _select(p: pins.Pins, refs: list[str]) -> list[Any]:
    """Patches by `upstream/id-prefix` (e.g. vllm/0001); none given: the whole series."""
    every = [patch for name in UPSTREAMS for patch in load_series(p.root, name)]
    if not refs:
        return every
    out = []
    for ref in refs:
        up, _, pid = ref.partition("/")
        hits = [x for x in every if x.upstream == up and x.id.startswith(pid)] if pid else []
        if len(hits) != 1:
            many = "no" if not hits else "more than one"
            raise SparkserveError(f"{ref!r} names {many} patch of the series (give upstream/NNNN, "
                                  "e.g. vllm/0001)")
        out += hits
    return out


def cmd_mutate(a: argparse.Namespace) -> int:
    import json

    from sparkserve_lab import mutate, proofs

    p = pins.load()
    if bool(a.site) == bool(a.tree):
        raise SparkserveError("give exactly one of --site DIR (patched site-packages) or --tree DIR (a dev "
                              "tree with the series applied)")
    where = Path(a.site or a.tree).resolve()
    given = shlex.split(a.command) if a.command else []
    outcomes = []
    commands = {}
    if a.fork and (given or Path(a.python).resolve() != Path(sys.executable).resolve()):
        raise SparkserveError("--fork runs the Proof tests with pytest in forks of this Python: "
                              "no --command, no other --python")
    chosen = _select(p, a.patch)
    if a.hunk and len(chosen) != 1:
        raise SparkserveError("--hunk names hunks of one patch: give that patch (e.g. flashinfer/0001)")
    for patch in chosen:
        mutate.select(mutate.hunks(patch), a.hunk or ())  # a wrong name fails before any test runs
        command = given or mutate.default_command(patch, a.python, a.tests_under)
        commands[f"{patch.upstream}/{patch.id}"] = command
        print(f"{patch.upstream}/{patch.id}: {' '.join(command)}", flush=True)
        runner = None
        if a.fork:
            from sparkserve_lab import forkrun

            runner = forkrun.ForkedPytest(command[3:], p.root, mutate.fresh_roots(patch, where, bool(a.site)))
        outcomes += mutate.mutate(patch, where, bool(a.site), command, p.root, runner,
                                  runner.first if runner else None, a.hunk or ())
    print("\n".join(mutate.table(outcomes)))
    out = proofs.artifact_path(a.out, "mutations.json")
    if out:
        data = mutate.as_json(outcomes, [])
        data["commands"] = commands
        if a.hunk:
            data["only"] = a.hunk
        del data["command"]
        out.write_text(json.dumps(data, indent=2) + "\n")
        print(f"-> {out}")
    survived = [o for o in outcomes if o.status == mutate.SURVIVED]
    if survived:
        print(f"FAIL: {len(survived)} hunk(s) survived: no test named fails without them")
        return FAILED
    return OK


def register(sub: Any) -> None:
    sp = sub.add_parser("mutate", help="revert each hunk alone, run the patch's Proof tests: caught/survived")
    sp.add_argument("patch", nargs="*", help="upstream/NNNN (default: the whole series)")
    sp.add_argument("--site", help="site-packages with the series applied (each hunk is put back after)")
    sp.add_argument("--tree", help="a dev tree with the series applied")
    sp.add_argument("--python", default=sys.executable, help="runs the Proof tests (default: this Python)")
    sp.add_argument("--out", help="the table as JSON (default under `proof run`: its folder/mutations.json)")
    sp.add_argument("--command", help="run this (one shell-quoted string, in the repo root) instead of "
                                      "pytest on the test files the Proof header names")
    sp.add_argument("--tests-under", metavar="DIR",
                    help="run only the Proof test files under DIR (tests/image: those that run on a CPU in "
                         "the image)")
    sp.add_argument("--hunk", action="append", metavar="FILE:LINE",
                    help="revert only this hunk (the end of its file's path and the old start line of its @@ "
                         "header, e.g. decode.cuh:363); repeat for more; the table then holds those alone")
    sp.add_argument("--fork", action="store_true",
                    help="import the tests' third-party modules (torch, ...) once and run pytest in a fresh "
                         "fork per hunk, the patched package imported anew each time; a survivor is "
                         "confirmed in a process of its own")
    sp.set_defaults(func=cmd_mutate)

