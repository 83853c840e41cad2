"""The deploy gate (docs/LEVELS.md): levels 1 and 2 against a running server, what `ansible-playbook
deploy.yml` runs inside the serving container before a release is kept.

    sparkserve level 1 --base-url URL                  smoke: up, model listed, one chat completion, harmony
    sparkserve level 2 --base-url URL [--reference R]  correctness: temperature-0 tokens, tool-call parse
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkserve.cli.common import finish
from sparkserve.errors import SparkserveError


def client_from_args(a: argparse.Namespace) -> Any:
    from sparkserve.gate.common import Client

    key = "EMPTY"
    if a.api_key_file:
        try:
            key = Path(a.api_key_file).read_text().strip()
        except OSError as exc:
            raise SparkserveError(f"cannot read the API key file {a.api_key_file}: {exc}") from None
    return Client(a.base_url, timeout=a.request_timeout, api_key=key or "EMPTY")


def server_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--base-url", required=True)
    sp.add_argument("--model", help="served model name (default: the first of /v1/models)")
    sp.add_argument("--request-timeout", type=float, default=600)
    sp.add_argument("--api-key-file", help="a file holding the server's API key (sent as a bearer token)")
    sp.add_argument("--json-out", help="write the level result (JSON) here")


def cmd_level1(a: argparse.Namespace) -> int:
    from sparkserve.gate import smoke

    res = smoke.run(client_from_args(a), a.model, a.harmony, a.max_tokens, a.random_weights)
    return finish(res, a.json_out)


def cmd_level2(a: argparse.Namespace) -> int:
    from sparkserve.gate import correctness

    res = correctness.run(
        client_from_args(a),
        a.model,
        Path(a.reference) if a.reference else None,
        Path(a.record) if a.record else None,
        a.configuration,
        a.max_tokens,
        a.min_prefix,
        a.min_mean_fraction,
        a.harmony,
        a.real_checkpoint,
    )
    return finish(res, a.json_out)


def register(sub: Any) -> None:
    lv = sub.add_parser("level", help="the deploy gate: level 1 (smoke) and level 2 (correctness) against a "
                                      "running server").add_subparsers(dest="level", required=True)
    sp = lv.add_parser("1", help="smoke: up, /v1/models, one chat completion, harmony reasoning (gpt-oss)")
    server_args(sp)
    sp.add_argument("--harmony", choices=["auto", "required", "skip"], default="auto")
    sp.add_argument("--max-tokens", type=int, default=64)
    sp.add_argument(
        "--random-weights",
        action="store_true",
        help="random-weight server: the harmony check is reported not applicable (never a pass)",
    )
    sp.set_defaults(func=cmd_level1)

    sp = lv.add_parser(
        "2", help="correctness: temperature-0 tokens vs reference, harmony/tool parse, arithmetic"
    )
    server_args(sp)
    sp.add_argument(
        "--reference", help="reference tokens JSON (from --record on the reference configuration)"
    )
    sp.add_argument("--record", help="write this server's tokens as a reference JSON")
    sp.add_argument("--configuration", default="unknown")
    sp.add_argument("--max-tokens", type=int, default=32)
    sp.add_argument("--min-prefix", type=int, default=8, help="tokens every prompt must agree on")
    sp.add_argument("--min-mean-fraction", type=float, default=0.5)
    sp.add_argument("--harmony", choices=["auto", "required", "skip"], default="auto")
    sp.add_argument("--real-checkpoint", action="store_true", help="real weights: require exact arithmetic")
    sp.set_defaults(func=cmd_level2)
