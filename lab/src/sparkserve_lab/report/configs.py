"""What the report's configuration names mean, and which one is the shipped default on a hardware.

The names are the keys of lab/configs/engine-kernels.toml; each has a `description`, and a configuration
that is exactly a shipped serving profile says so with `profile = "<name of profiles/*.env>"`. The
shipped default of a hardware is the profile `docker compose up serve` uses on its target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkserve_lab.validate import rulesfile

DEFAULT_FILE = Path("lab") / "configs" / "engine-kernels.toml"
# The profile each target starts with (README, "Serving").
DEFAULT_PROFILE = {"spark": "spark", "sm120": "desktop-sm120", "hopper": "hopper-h100"}
# Hardware labels of the run store (results/<hardware>/) -> serving target.
_HW_TARGET = (("gb10", "spark"), ("spark", "spark"), ("h100", "hopper"), ("h200", "hopper"),
              ("rtx", "sm120"), ("pro-6000", "sm120"), ("5090", "sm120"))


@dataclass(frozen=True)
class ConfigInfo:
    name: str
    description: str
    profile: str | None = None  # the shipped profile this configuration is, if any


@dataclass(frozen=True)
class Shipped:
    profile: str  # profiles/<profile>.env
    configuration: str | None  # its configuration name, None when no configuration is that profile
    # the kernel choices of the profile file today (kernel_choices()); None when the file was not read
    kernels: dict[str, str] | None = None
    values: dict[str, str] | None = None  # the profile file's variables today


def kernel_choices(env: dict[str, str]) -> dict[str, str] | None:
    """What a profile environment decides about the kernels (the variables whose values kernel rules
    check), as the entrypoint's parser reads them; None when today's parser refuses the environment."""
    from sparkserve.serving.checkpoint import name_says_gpt_oss
    from sparkserve.serving.profile import ProfileError, parse
    from sparkserve.serving.settings import SETTINGS

    try:
        p = parse(env, gpt_oss=name_says_gpt_oss)
    except ProfileError:
        return None
    return {s.var: str(getattr(p, s.field)) for s in SETTINGS if s.facts}


def load(path: Path) -> dict[str, ConfigInfo]:
    return {name: ConfigInfo(name, t.description, t.profile or None)
            for name, t in rulesfile.load(path).configurations.items()}


def target_of(hardware: str) -> str | None:
    return next((t for key, t in _HW_TARGET if key in hardware.lower()), None)


def shipped_default(hardware: str, configs: dict[str, ConfigInfo],
                    profiles_dir: Path | None = None) -> Shipped | None:
    """The shipped default profile on this hardware and its configuration name (None for CPU runs); with
    `profiles_dir`, also what its file decides about the kernels today."""
    target = target_of(hardware)
    if target is None:
        return None
    profile = DEFAULT_PROFILE[target]
    kernels = values = None
    if profiles_dir is not None and (profiles_dir / f"{profile}.env").is_file():
        from sparkserve.serving import envfile

        values = envfile.read(profiles_dir / f"{profile}.env", {})
        kernels = kernel_choices(values)
    return Shipped(profile, next((c.name for c in configs.values() if c.profile == profile), None), kernels,
                   values)
