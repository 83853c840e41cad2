"""Helpers shared by the verb-group modules: repo-relative defaults, list parsing, level verdicts."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkserve import progress
from sparkserve.errors import SparkserveError
from sparkserve.progress import error, say

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


def int_list(text: str, *, minimum: int = 1, maximum: int | None = None) -> list[int]:
    """Whole numbers separated by commas (and/or spaces: "0 1024 2048", "4, 5"), in the order given.

    Refused with ValueError: no number at all, an empty item ("4,,5", "4,"), anything but digits with an
    optional minus ("x", "1.5", "1_000"), and a value outside minimum..maximum. The message says what is
    expected; argparse (int_list_arg) puts the option's name before it."""
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def refuse(why: str) -> ValueError:
        return ValueError(f"expected whole numbers {bounds} separated by commas, got {text!r} ({why})")

    values: list[int] = []
    for item in text.split(","):
        words = item.split()
        if not words:
            raise refuse("an empty item")
        for word in words:
            if not re.fullmatch(r"-?[0-9]+", word):
                raise refuse(f"{word!r} is not a whole number")
            value = int(word)
            if value < minimum:
                raise refuse(f"{value} is below {minimum}")
            if maximum is not None and value > maximum:
                raise refuse(f"{value} is above {maximum}")
            values.append(value)
    return values


def int_list_arg(*, minimum: int = 1, maximum: int | None = None) -> Callable[[str], list[int]]:
    """int_list as an argparse `type=`: a bad list is a usage error (exit 2) naming the option."""

    def parse(text: str) -> list[int]:
        try:
            return int_list(text, minimum=minimum, maximum=maximum)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def finish(res: Any, json_out: str | None) -> int:
    """Write a level result (when asked), print its verdict, and turn it into an exit code."""
    res.write(Path(json_out) if json_out else None)
    say(res.summary())
    return OK if res.ok else FAILED


def build_parser(groups: tuple[Any, ...], prog: str, description: str | None,
                 version: str | None = None) -> argparse.ArgumentParser:
    from sparkserve import __version__

    ap = argparse.ArgumentParser(prog=prog, description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"{prog} {version or __version__}")
    # Global, before the verb: `sparkserve --json pins`, `sparkserve -q patches apply ...`.
    ap.add_argument("--json", dest="json_output", action="store_true",
                    help="print the verb's data as one JSON document on stdout (verbs that print data)")
    noise = ap.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true", help="only errors and warnings on stderr")
    noise.add_argument("-v", "--verbose", action="store_true", help="also the detail lines of long work")
    sub = ap.add_subparsers(dest="command", required=True)
    for group in groups:
        group.register(sub)
    return ap


def print_json(data: Any) -> None:
    """A verb's data as one JSON document on stdout (`--json`)."""
    import json

    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def run(ap: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse argv and run the verb, with the exit codes above."""
    args = ap.parse_args(argv)
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    progress.set_verbosity(progress.QUIET if quiet else progress.VERBOSE if verbose else progress.NORMAL)
    if getattr(args, "json_output", False) and not getattr(args, "json_data", False):
        ap.error(f"{args.command}: this verb prints no data to give as JSON (--json: pins, doctor, profile "
                 "check, patches list; the lab's metadata, trace summarize, speculative table)")
    try:
        return int(args.func(args))
    except SparkserveError as exc:
        error(f"{ap.prog}: error: {exc}")
        return ERROR
    except PermissionError as exc:
        # In the image every verb runs as the serving user (uid 10001), also on folders bind-mounted
        # from the host. The error does not say whether reading or writing was refused.
        error(f"{ap.prog}: error: {exc.filename or exc}: permission denied for uid {os.getuid()}; give "
              f"this user the folder (in the image: `sudo chown -R 10001:10001 FOLDER`)")
        return ERROR
    except KeyboardInterrupt:
        error(f"{ap.prog}: interrupted")
        return INTERRUPTED
