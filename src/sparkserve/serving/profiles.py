"""The serving profiles (profiles/<name>.env): the entrypoint reads the one SPARKSERVE_PROFILE names
(`container_env`), and the harness reads one, applies overrides and resolves it with the entrypoint's own
parser, so that what is measured is what a user deploys.

An env file is read with compose's own rules (serving/envfile.py): quotes, `export`, comments, escapes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import envfile
from sparkserve.serving.profile import Profile, ProfileError, check_known, parse

PROFILES_DIR = "profiles"
# The image's copy of the checkout (Dockerfile: SPARKSERVE_ROOT), where its profiles/ are.
IMAGE_ROOT = Path("/opt/sparkserve")


def read_env_file(path: Path, lookup: Mapping[str, str] | None = None) -> dict[str, str]:
    """An env file as compose's `env_file` reads it (serving/envfile.py); `lookup` is what compose would
    substitute `${NAME}` from (its environment: by default this process's)."""
    try:
        return envfile.read(path, os.environ if lookup is None else lookup)
    except OSError as exc:
        raise SparkserveError(f"cannot read the profile {path}: {exc.strerror}") from None
    except envfile.EnvFileError as exc:
        raise SparkserveError(f"{path}: {exc}") from None


def names(folder: Path) -> list[str]:
    """The profiles of a folder: each env file's SPARKSERVE_PROFILE (its stem when it has none)."""
    return sorted({_declared(path) or path.stem for path in folder.glob("*.env")})


def profile_path(name: str, root: Path) -> Path:
    """`spark` -> <root>/profiles/spark.env (or the env file there that says SPARKSERVE_PROFILE=spark); a
    path to an env file is taken as it is. A ProfileError lists the profiles there is."""
    folder = root / PROFILES_DIR
    if name.endswith(".env") or "/" in name:
        path = Path(name) if Path(name).is_absolute() else root / name
    else:
        path = folder / f"{name}.env"
        if not path.is_file():
            path = next((f for f in sorted(folder.glob("*.env")) if _declared(f) == name), path)
    if not path.is_file():
        known = ", ".join(names(folder)) or "none"
        raise ProfileError("SPARKSERVE_PROFILE", name,
                           f"no serving profile {name!r} ({path} does not exist); the profiles in "
                           f"{folder}: {known}. Name one of them (compose: SPARKSERVE_PROFILE in the shell "
                           f"or in .env next to docker-compose.yml); a profile of your own goes in "
                           f"{folder.name}/{name}.env of the checkout, and the image carries it after "
                           "`docker compose build`")
    return path


def _declared(path: Path) -> str | None:
    try:
        return envfile.read(path, {}).get("SPARKSERVE_PROFILE")
    except (OSError, envfile.EnvFileError):
        return None


# docker-compose.yml sets this to the profile env file it was asked to load (profiles/<name>.env). The
# file names itself (SPARKSERVE_PROFILE=<name>), so a container that has the marker and no
# SPARKSERVE_PROFILE was started with a name compose found no file for.
COMPOSE_PROFILE_FILE = "SPARKSERVE_PROFILE_FILE"


@dataclass(frozen=True)
class ContainerEnv:
    env: dict[str, str]
    warnings: list[str]


def entrypoint_root(env: Mapping[str, str]) -> Path:
    """Where the entrypoint finds profiles/: $SPARKSERVE_ROOT (the image sets it), else the checkout this
    package runs from (a GPU host's scripts run the entrypoint from one without setting it), else the
    image's folder."""
    given = env.get("SPARKSERVE_ROOT", "").strip()
    if given:
        return Path(given)
    checkout = Path(__file__).resolve().parents[3]
    return checkout if (checkout / PROFILES_DIR).is_dir() else IMAGE_ROOT


def container_env(env: Mapping[str, str], root: Path) -> ContainerEnv:
    """The environment the entrypoint validates.

    Under compose (COMPOSE_PROFILE_FILE set) compose loaded the checkout's profile file: the environment is
    the profile, and a profile file compose did not find is a ProfileError listing the profiles. Elsewhere
    (docker run, Kubernetes) SPARKSERVE_PROFILE names a profile of the image (<root>/profiles, read with
    compose's rules) or the path of an env file, whose variables the environment's override; a name the
    image does not have is a ProfileError listing the image's profiles (served as the built-in defaults,
    a misspelled name would go unnoticed)."""
    marker = env.get(COMPOSE_PROFILE_FILE)
    if marker is not None:
        if env.get("SPARKSERVE_PROFILE", "").strip():
            return ContainerEnv(dict(env), [])
        name = Path(marker).stem
        known = ", ".join(names(root / PROFILES_DIR)) or "none"
        raise ProfileError("SPARKSERVE_PROFILE", name,
                           f"no serving profile {name!r}: compose found no {marker} (or the file does not "
                           f"name itself with SPARKSERVE_PROFILE={name}); the profiles of this image: "
                           f"{known}. Name one of them (SPARKSERVE_PROFILE in the shell or in .env next to "
                           f"docker-compose.yml), or add {marker} to the checkout")
    name = env.get("SPARKSERVE_PROFILE", "").strip()
    if not name:
        return ContainerEnv(dict(env), [])
    try:
        path = profile_path(name, root)
    except ProfileError:
        raise ProfileError("SPARKSERVE_PROFILE", name, _not_in_image(name, root)) from None
    try:
        values = envfile.read(path, env)
    except OSError as exc:
        raise ProfileError("SPARKSERVE_PROFILE", name, f"cannot read {path}: {exc.strerror}") from None
    except envfile.EnvFileError as exc:
        raise ProfileError("SPARKSERVE_PROFILE", name, f"{path}: {exc}") from None
    return ContainerEnv({**values, **env}, [])


def _not_in_image(name: str, root: Path) -> str:
    known = ", ".join(names(root / PROFILES_DIR)) or "none"
    mounted = f"/etc/sparkserve/{Path(name).stem}.env"
    return (f"this image has no serving profile {name!r}; its profiles ({root / PROFILES_DIR}): {known}. "
            f"Name one of them, or mount a profile file of your own and name its path (docker run -v "
            f"$PWD/{Path(name).stem}.env:{mounted}:ro -e SPARKSERVE_PROFILE={mounted})")


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
            overrides: Mapping[str, str] | None = None, served: Mapping[str, str] | None = None) -> Resolved:
    """The profile file (or `served`: its values as a recorded run served them), then `common` (settings
    of the harness, e.g. a local checkpoint), then the `overrides` under test (profile variables, or engine
    variables as a profile file may hold them); parsed by the entrypoint's parser, whose ProfileError names
    the variable."""
    env = dict(served) if served is not None else read_env_file(profile_path(name, root))
    check_known(list(common or {}), "harness settings")
    check_known(list(overrides or {}), "overrides", engine=True)
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
