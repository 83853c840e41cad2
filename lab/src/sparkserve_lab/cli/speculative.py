"""`sparkserve speculative`: speculative decoding proved and costed on a GPU host (docs/GPU.md).

    sparkserve speculative identity PROFILE --matrix M --set SPECULATIVE=eagle3 ...   greedy ids equal
    sparkserve speculative identity --reference-url A --speculative-url B             two running servers
    sparkserve speculative cost PROFILE --matrix M --set SPECULATIVE=eagle3 ...       step time per k
    sparkserve speculative table RECORD                                              the cost table again
    sparkserve speculative recheck RECORD --matrix M                   a record judged by today's rules
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, int_list_arg, path_arg, root
from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve_lab.cli.common import DEFAULT_STORE


def cmd_identity(a: argparse.Namespace) -> int:
    from sparkserve.serving import profiles
    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import runs

    if a.reference_url or a.speculative_url:
        if not (a.reference_url and a.speculative_url) or a.profile:
            raise SparkserveError("give both --reference-url and --speculative-url, and no PROFILE")
        verdict = runs.identity_urls(a.reference_url, a.speculative_url, a.max_tokens, a.tie_margin)
    else:
        if not a.profile or not a.matrix:
            raise SparkserveError("give PROFILE and --matrix (or two running servers' URLs)")
        path, verdict = runs.identity_run(
            a.profile, profiles.parse_set(a.set), matrix.load(Path(a.matrix)), root(),
            path_arg(a, "store", DEFAULT_STORE), Path(a.work) if a.work else root() / ".work" / "speculative",
            a.max_tokens, a.tie_margin)
        print(path)
    say(f"greedy identity with speculation: {'PASS' if verdict.ok else 'FAIL'}: {verdict.detail()}")
    return OK if verdict.ok else FAILED


def cmd_cost(a: argparse.Namespace) -> int:
    from sparkserve.serving import profiles
    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import cost, runs

    modes = a.modes.split(",")
    if not set(modes) <= {"zero", "full"}:
        raise SparkserveError(f"--modes takes zero and full, not {a.modes}")
    path, points, invalid = runs.cost_run(
        a.profile, profiles.parse_set(a.set), matrix.load(Path(a.matrix)), root(),
        path_arg(a, "store", DEFAULT_STORE), Path(a.work) if a.work else root() / ".work" / "speculative",
        a.tokens, modes, a.gen_tokens, a.repeats)
    print(path)
    if invalid:
        say(f"cost run INVALID (level 1.5): {'; '.join(invalid)}")
        return FAILED
    print(cost.markdown(cost.costs(points), path.parent.name), end="")
    return OK


def cmd_table(a: argparse.Namespace) -> int:
    from sparkserve_lab.speculative import cost

    meta: dict[str, Any] = json.loads((Path(a.record) / "metadata.json").read_text())
    if meta.get("valid") is False:
        say(f"{a.record}: invalid (level 1.5): {'; '.join(meta.get('invalid') or [])}")
        return FAILED
    points = [cost.Point(int(p["k"]), str(p["mode"]), float(p["tok_s"]), float(p["acceptance_length"]))
              for p in meta["points"]]
    table = cost.costs(points)
    if a.json_output:
        from dataclasses import asdict

        from sparkserve.cli.common import print_json

        print_json({"hardware": meta.get("hardware"), "costs": [asdict(c) for c in table]})
        return OK
    print(cost.markdown(table, str(meta.get("hardware"))), end="")
    for row in cost.estimates(table):
        est = row["estimate"]
        shown = (f"{est['tok_s']:.1f} tok/s, x{est['speedup']:.2f}" if est else f"no estimate: {row['why']}")
        print(f"estimate: {row['draft']} (published acceptance length {row['acceptance_length']} at "
              f"k={row['k']}, "
              f"{row['where']}): {shown}")
    return OK


def cmd_recheck(a: argparse.Namespace) -> int:
    from sparkserve_lab.levels import matrix
    from sparkserve_lab.speculative import recheck

    out = recheck.recheck(Path(a.record), matrix.load(Path(a.matrix)), root())
    if out["kind"] == "speculative-identity":
        say(f"greedy identity with speculation (rechecked): {'PASS' if out['ok'] else 'FAIL'}: "
            f"{out['verdict']['detail']}")
    elif out["ok"]:
        print(out["table"], end="")
    else:
        say(f"cost run still INVALID (level 1.5): {'; '.join(out['invalid'])}")
    say(f"-> {Path(a.record) / recheck.RECHECK} (the record's own verdict was "
        f"{'ok' if out['was'] else 'not ok'})")
    return OK if out["ok"] else FAILED


def _served(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--matrix",
                    help="where and how to serve: a level-6 matrix file (server, set, random_weights)")
    sp.add_argument("--set", action="append", metavar="VAR=VALUE",
                    help="the speculative arm's profile variables (repeatable), e.g. SPECULATIVE=eagle3")
    sp.add_argument("--store", help=f"default: <repo>/{DEFAULT_STORE}")
    sp.add_argument("--work", help="server logs (default .work/speculative)")


def register(sub: Any) -> None:
    group = sub.add_parser("speculative", help="speculative decoding: greedy identity and cost (GPU host)")
    verbs = group.add_subparsers(required=True)
    from sparkserve.serving.speculative import TOKENS_MAX, TOKENS_MIN
    from sparkserve_lab.speculative.identity import DEFAULT_TIE_MARGIN

    sp = verbs.add_parser("identity", help="greedy token ids with and without speculation must agree")
    sp.add_argument("profile", nargs="?", help="a serving profile (profiles/NAME.env or a path)")
    _served(sp)
    sp.add_argument("--reference-url", help="a running server without speculation")
    sp.add_argument("--speculative-url", help="a running server with it (its /metrics must count drafts)")
    sp.add_argument("--max-tokens", type=int, default=64, help="tokens per prompt (64)")
    sp.add_argument("--tie-margin", type=float, default=DEFAULT_TIE_MARGIN,
                    help=f"nats under which a differing token is a rounding near-tie ({DEFAULT_TIE_MARGIN})")
    sp.set_defaults(func=cmd_identity)

    sp = verbs.add_parser("cost", help="step time and tokens per step for each k, zero and full acceptance")
    sp.add_argument("profile", help="a serving profile (profiles/NAME.env or a path)")
    _served(sp)
    sp.add_argument("--tokens", type=int_list_arg(minimum=TOKENS_MIN, maximum=TOKENS_MAX),
                    default="1,2,3,4,5,6",
                    help=f"the k values, each {TOKENS_MIN} to {TOKENS_MAX} as SPECULATIVE_TOKENS takes "
                         "(1,2,3,4,5,6)")
    sp.add_argument("--modes", default="zero,full",
                    help="zero (the draft as given), full (synthetic): zero,full")
    sp.add_argument("--gen-tokens", type=int, default=256, help="tokens per timed completion (256)")
    sp.add_argument("--repeats", type=int, default=5, help="timed pairs per configuration (5)")
    sp.set_defaults(func=cmd_cost)

    sp = verbs.add_parser("recheck", help="a stored identity or cost record judged again by this checkout's "
                                          "level-1.5 rules (writes recheck.json beside it)")
    sp.add_argument("record", help="lab/results/<hardware>/<id>-speculative-{identity,cost}-...")
    sp.add_argument("--matrix", required=True, help="the matrix the record was served with")
    sp.set_defaults(func=cmd_recheck)

    sp = verbs.add_parser("table", help="the cost table and the estimates of a recorded cost run")
    sp.add_argument("record", help="lab/results/<hardware>/<id>-speculative-cost-...")
    sp.set_defaults(func=cmd_table, json_data=True)
