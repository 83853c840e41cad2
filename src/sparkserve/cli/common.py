"""Helpers shared by the verb-group modules: repo-relative defaults, list parsing, level verdicts."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.progress import say

DEFAULT_STORE = "results"
DEFAULT_KERNEL_RULES = "configs/engine-kernels.toml"

# Exit codes of every verb (README, "Exit codes"). argparse itself exits USAGE on a bad command line.
OK = 0
FAILED = 1  # the verb ran and its check, level or comparison failed
USAGE = 2  # the command line is wrong (argparse)
ERROR = 3  # the verb could not do its job (bad input file, missing tree, network...): the message says why
INTERRUPTED = 130


def root() -> Path:
    """The checkout holding pins.toml, or the working directory outside one."""
    from sparkserve.supply import pins

    try:
        return pins.find_root()
    except SparkserveError:
        return Path.cwd()


def path_arg(a: argparse.Namespace, name: str, default: str) -> Path:
    v = getattr(a, name, None)
    return Path(v) if v else root() / default


def ints(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError as exc:
        raise SparkserveError(f"not a list of integers: {text!r}") from exc


def finish(res: Any, json_out: str | None) -> int:
    """Write a level result (when asked), print its verdict, and turn it into an exit code."""
    res.write(Path(json_out) if json_out else None)
    say(res.summary())
    return OK if res.ok else FAILED


def store_args(sp: argparse.ArgumentParser, rules: bool = True) -> None:
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.add_argument(
        "--hardware", help="results/<hardware>/ label (default: detected GPU, else cpu-<arch>-<n>c)"
    )
    if rules:
        sp.add_argument("--rules", help=f"kernel rules (default: <repo>/{DEFAULT_KERNEL_RULES})")



def build_parser(groups: tuple[Any, ...], prog: str, description: str | None) -> argparse.ArgumentParser:
    from sparkserve import __version__

    ap = argparse.ArgumentParser(prog=prog, description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"sparkserve {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for group in groups:
        group.register(sub)
    return ap


def run(ap: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse argv and run the verb, with the exit codes above."""
    args = ap.parse_args(argv)
    try:
        return int(args.func(args))
    except SparkserveError as exc:
        say(f"sparkserve: error: {exc}")
        return ERROR
    except PermissionError as exc:
        # In the image every verb runs as the serving user (uid 10001), also on folders bind-mounted
        # from the host such as the harness's ./results. The error does not say whether reading or
        # writing was refused.
        say(f"sparkserve: error: {exc.filename or exc}: permission denied for uid {os.getuid()}; give this "
            f"user the folder (for the image's harness and ./results: `sudo chown -R 10001:10001 results`)")
        return ERROR
    except KeyboardInterrupt:
        say("sparkserve: interrupted")
        return INTERRUPTED
