"""`profile check`: a serving profile checked on this host.

    sparkserve profile check NAME|FILE [--set VAR=VALUE ...] [--local-env FILE]
        a serving profile (profiles/NAME.env of the checkout, or an env file) with overrides, validated as
        the entrypoint's preflight does, on a host without Docker, a GPU or the patched vLLM: the vLLM
        command, and what this host could not check (serving/profilecheck.py); exit 0 valid, 2 invalid
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from sparkserve.cli.common import OK, print_json, root
from sparkserve.progress import error, say

# `profile check` of an invalid profile: the entrypoint's own code for it (serving/preflight.EXIT_PROFILE).
INVALID_PROFILE = 2


def cmd_check(a: argparse.Namespace) -> int:
    from sparkserve.serving import profilecheck, profiles
    from sparkserve.serving.profile import ProfileError

    overrides = profiles.read_env_file(Path(a.local_env)) if a.local_env else {}
    overrides.update(profiles.parse_set(a.set))
    try:
        result = profilecheck.check(a.profile, root(), overrides)
    except ProfileError as exc:
        error(f"profile check: invalid serving profile: {exc}")
        return INVALID_PROFILE
    p = result.profile
    if a.json_output:
        print_json({"valid": True, "profile": p.name, "target": p.target,
                    "mxfp4_layers": sorted(p.mxfp4_layers), "command": result.command, "found": result.found,
                    "not_checked": result.unchecked})
        return OK
    layers = ",".join(sorted(p.mxfp4_layers)) or "none"
    print(f"  profile: {p.name} (target {p.target}, MXFP4 layers: {layers})")
    print("  command: " + shlex.join(result.command))
    for line in result.found:
        print(f"  {line}")
    print("  not checked on this host:")
    for line in result.unchecked:
        print(f"    - {line}")
    say(f"profile check: {a.profile} is valid as far as this host can check ({len(result.unchecked)} "
        "thing(s) not checked here: above)")
    return OK


def register(sub: Any) -> None:
    p = sub.add_parser("profile", help="check a serving profile on this host, without Docker or a GPU") \
        .add_subparsers(dest="what", required=True)
    sp = p.add_parser("check", help="validate a serving profile and print its vLLM command, without Docker, "
                                    "a GPU or the patched vLLM; says what this host could not check")
    sp.add_argument("profile", help="a profile of the checkout (spark, desktop-sm120 ...) or an env file")
    sp.add_argument("--set", action="append", metavar="VAR=VALUE",
                    help="a value over the profile's (repeatable), as the local env file would give it")
    sp.add_argument("--local-env", metavar="FILE",
                    help="an env file whose values override the profile's (compose: SPARKSERVE_LOCAL_ENV); "
                         "--set goes over it")
    sp.set_defaults(func=cmd_check, json_data=True)
