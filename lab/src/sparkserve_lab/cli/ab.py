"""`sparkserve ab`: an interleaved end-to-end A/B of a profile against one or more of its variables."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, int_list_arg, path_arg, root
from sparkserve.progress import say
from sparkserve_lab.cli.common import DEFAULT_KERNEL_RULES, DEFAULT_STORE


def cmd_ab(a: argparse.Namespace) -> int:
    from sparkserve.serving import profiles
    from sparkserve_lab import ab
    from sparkserve_lab.levels import matrix
    from sparkserve_lab.runstore import Store

    repo = root()
    settings = matrix.load(Path(a.matrix))
    if a.hardware:
        settings = replace(settings, hardware=a.hardware)
    both = profiles.parse_set(a.both)
    if both:
        settings = replace(settings, variables={**settings.variables, **both})
    more = tuple(profiles.parse_set(shlex.split(arm)) for arm in a.arm or [])
    done = ab.run_arms(
        a.profile, profiles.parse_set(a.set), settings, repo, Store(path_arg(a, "store", DEFAULT_STORE)),
        path_arg(a, "rules", DEFAULT_KERNEL_RULES), a.rounds, a.runs,
        Path(a.work) if a.work else repo / ".work" / "ab", a.concurrent,
        tuple(a.gpus.split(",")) if a.gpus else None,  # placements() checks one per arm
        a.preset, a.concurrency, more, sleep=a.sleep,
    )
    rc = OK
    for record, results in done:
        meta = record.metadata()
        say(f"{meta.get('name')}:")
        for line in ab.summary(results):
            say(line)
        print(record.path)
        if not meta.get("valid"):
            say(f"A/B INVALID: {'; '.join(meta.get('invalid_runs', []))} -> {record.path}")
            rc = FAILED
    return rc


def register(sub: Any) -> None:
    sp = sub.add_parser("ab", help="interleaved end-to-end A/B: PROFILE (A) vs PROFILE with --set (B)")
    sp.add_argument("profile", help="a serving profile (profiles/NAME.env or a path)")
    sp.add_argument("--set", action="append", metavar="VAR=VALUE", required=True,
                    help="arm B's override of a profile variable, or an engine variable as a profile file "
                         "may set one (VLLM_*, TORCHINDUCTOR_*, ...); repeatable")
    sp.add_argument("--matrix", required=True,
                    help="where and how to serve: a level-6 matrix file (its server, tokenizer, set, "
                         "random_weights, bench are used; its configurations are not)")
    sp.add_argument("--both", action="append", metavar="VAR=VALUE",
                    help="a setting of both arms, not compared (GPU_MEMORY_UTILIZATION with --concurrent)")
    sp.add_argument("--rounds", type=int, default=5, help="ABAB... rounds (5)")
    sp.add_argument("--runs", type=int, default=5, help="timed requests per test, arm and round (5)")
    sp.add_argument("--preset", default="ab",
                    help="the benchmark of each arm and round: ab (pp2048/tg128, c=1; default) or another "
                         "level-4 preset, e.g. concurrency or load (judged per concurrency)")
    sp.add_argument("--concurrency", metavar="C,C,...", type=int_list_arg(),
                    help="only these concurrencies of the preset (e.g. 4,5,8,10 around the ones a change "
                         "is about: a whole curve per arm and round takes minutes)")
    sp.add_argument("--concurrent", action="store_true",
                    help="both engines up at once, started once, alternating requests (needs memory for "
                         "two); default: one engine at a time, a fresh start per arm and round")
    sp.add_argument("--sleep", action="store_true",
                    help="both engines on one GPU, started once, each with the profile's memory: the one "
                         "not measured sleeps (vLLM's sleep mode: its weights in host memory, its KV cache "
                         "freed); for loads whose KV cache two engines cannot share")
    sp.add_argument("--arm", action="append", metavar="'VAR=VALUE ...'",
                    help="one more arm (C, D, ...): its overrides, space-separated in one argument; each "
                         "is compared with A in a record of its own; repeatable")
    sp.add_argument("--gpus", metavar="I,J,...",
                    help="one GPU of one host per arm: each arm on its own, all up at once, alternating "
                         "requests; the arms rotate over the GPUs in equal blocks of rounds (two arms: "
                         "swapped after half the rounds), each rotation a restart of every engine")
    sp.add_argument("--store", help=f"default: <repo>/{DEFAULT_STORE}")
    sp.add_argument("--hardware", help="lab/results/<hardware>/ label (default: detected GPU)")
    sp.add_argument("--rules", help=f"default: <repo>/{DEFAULT_KERNEL_RULES}")
    sp.add_argument("--work", help="server logs (default .work/ab)")
    sp.set_defaults(func=cmd_ab)
