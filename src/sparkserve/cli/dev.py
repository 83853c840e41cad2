"""Verbs of the developer source trees and the dev container: `dev init|install|check|enter`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK
from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import devcheck, devtree, editable, pins
from sparkserve.supply.sourcetree import MissingTree


def _trees(p: pins.Pins, a: argparse.Namespace) -> dict[str, Path]:
    """Every upstream's tree, checked (present, made from the pins); the message says how to make them."""
    base = Path(a.dir) if a.dir else None
    try:
        return {name: devtree.require(p, name, base) for name in p.upstreams}
    except MissingTree as exc:
        raise MissingTree(f"{exc}. The dev container mounts them from the host: run `sparkserve dev init` "
                          f"in the checkout (or set {devtree.ENV_DIR} to where they are)") from None


def cmd_dev_init(a: argparse.Namespace) -> int:
    p = pins.load()
    for name, path in devtree.init(p, Path(a.dir) if a.dir else None).items():
        print(f"{name}: {path}")
    return OK


def _install(p: pins.Pins, trees: dict[str, Path], force: bool) -> None:
    for name, tree in trees.items():
        done = editable.install(p, name, tree, force=force)
        if done.skipped:
            say(f"{name}: installed editable from {tree} already")
        else:
            restored = f"; restored {', '.join(done.restored)} (rewritten by the build)" \
                if done.restored else ""
            say(f"{name}: editable from {tree} in {done.seconds:.0f}s{restored}")


def cmd_dev_install(a: argparse.Namespace) -> int:
    p = pins.load()
    _install(p, _trees(p, a), a.force)
    return OK


def cmd_dev_check(a: argparse.Namespace) -> int:
    p = pins.load()
    trees = _trees(p, a)
    for name, tree in trees.items():
        print(f"{name} tree: {tree}: {devtree.describe(tree)}")
    origins = devcheck.check(trees)
    for o in origins:
        print(o.line())
    return OK if all(o.ok for o in origins) else FAILED


def cmd_dev_enter(a: argparse.Namespace) -> int:
    """The dev container's entrypoint: editable installs, the origin check (in a new interpreter, which
    sees the installs' import hooks), then the command."""
    p = pins.load()
    trees = _trees(p, a)
    _install(p, trees, force=False)
    check = [sys.executable, "-m", "sparkserve", "dev", "check", *(["--dir", a.dir] if a.dir else [])]
    if subprocess.run(check, check=False).returncode != 0:
        say("sparkserve: refusing to start: vllm/flashinfer do not come from the mounted trees (above)")
        return FAILED
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    command = command or ["bash"]
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        raise SparkserveError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    return OK  # not reached


def register(sub: Any) -> None:
    dev = sub.add_parser("dev", help="developer source trees and the dev container").add_subparsers(
        required=True)
    where = f"default: ${devtree.ENV_DIR}, else <repo>/{devtree.DEFAULT_DIR}"
    sp = dev.add_parser("init", help="git trees of the pinned sdists with the series committed")
    sp.add_argument("--dir", help=where)
    sp.set_defaults(func=cmd_dev_init)

    sp = dev.add_parser("install", help="(dev container) install the trees editable, offline")
    sp.add_argument("--dir", help=where)
    sp.add_argument("--force", action="store_true", help="reinstall even when installed from the trees")
    sp.set_defaults(func=cmd_dev_install)

    sp = dev.add_parser("check", help="where vllm and flashinfer import from; fails unless from the trees")
    sp.add_argument("--dir", help=where)
    sp.set_defaults(func=cmd_dev_check)

    sp = dev.add_parser("enter", help="(dev container entrypoint) install, check, then run COMMAND")
    sp.add_argument("--dir", help=where)
    sp.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS] (default: bash)")
    sp.set_defaults(func=cmd_dev_enter)
