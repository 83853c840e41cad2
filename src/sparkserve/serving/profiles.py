"""The shipped serving profiles (profiles/<name>.env) as the harness uses them: read one, apply
overrides, and resolve it with the entrypoint's own parser, so that what is measured is what a user
deploys.

An env file is what compose's `env_file` reads: `KEY=VALUE` lines, `#` comments, blank lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving.profile import Profile, check_known, parse

PROFILES_DIR = "profiles"


def read_env_file(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SparkserveError(f"cannot read the profile {path}: {exc.strerror}") from None
    out: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise SparkserveError(f"{path}:{n}: not KEY=VALUE: {line!r}")
        out[key.strip()] = value.strip()
    return out


def profile_path(name: str, root: Path) -> Path:
    """`spark` -> <root>/profiles/spark.env; a path to an env file is taken as it is."""
    if name.endswith(".env") or "/" in name:
        path = Path(name) if Path(name).is_absolute() else root / name
    else:
        path = root / PROFILES_DIR / f"{name}.env"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (root / PROFILES_DIR).glob("*.env")))
        raise SparkserveError(f"no serving profile {name!r} ({path} does not exist; shipped: {known})")
    return path


@dataclass(frozen=True)
class Resolved:
    """A profile with its overrides: the environment the server gets and what the entrypoint makes of it."""

    name: str
    env: dict[str, str]
    profile: Profile
    overrides: dict[str, str]

    @property
    def label(self) -> str:
        """`spark`, or `spark+MXFP4_LAYERS=moe` for an ablation."""
        return self.name + "".join(f"+{k}={v}" for k, v in sorted(self.overrides.items()))


def resolve(name: str, root: Path, common: Mapping[str, str] | None = None,
            overrides: Mapping[str, str] | None = None) -> Resolved:
    """The profile file, then `common` (settings of the harness, e.g. a local checkpoint), then the
    `overrides` under test; parsed by the entrypoint's parser, whose ProfileError names the variable."""
    env = read_env_file(profile_path(name, root))
    check_known(list(common or {}), "harness settings")
    check_known(list(overrides or {}), "overrides")
    env.update(common or {})
    env.update(overrides or {})
    return Resolved(name, env, parse(env), dict(overrides or {}))


def parse_set(items: list[str] | None) -> dict[str, str]:
    """`--set VAR=VALUE` arguments as a mapping."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SparkserveError(f"--set takes VAR=VALUE, got {item!r}")
        out[key] = value
    return out
