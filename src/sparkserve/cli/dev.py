"""Verbs of the developer source trees: `dev init`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkserve.cli.common import OK
from sparkserve.supply import devtree, pins


def cmd_dev_init(a: argparse.Namespace) -> int:
    p = pins.load()
    for name, path in devtree.init(p, Path(a.dir) if a.dir else p.root / devtree.DEFAULT_DIR).items():
        print(f"{name}: {path}")
    return OK


def register(sub: Any) -> None:
    dev = sub.add_parser("dev", help="developer source trees").add_subparsers(required=True)
    sp = dev.add_parser("init", help="git trees of the pinned sdists with the series committed")
    sp.add_argument("--dir", help=f"default: <repo>/{devtree.DEFAULT_DIR}")
    sp.set_defaults(func=cmd_dev_init)
