"""The schema of lab/configs/engine-kernels.toml, read once by sparkserve.config for its three readers: the
configurations (validate/kernels.py), the profile rules (validate/profile_rules.py) and the report's
configuration names (report/configs.py). What is more than a type (categories, regexes, `extends`
references, `when` keys) is checked by those readers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sparkserve import config

# category -> regexes (validate/rules.py checks the categories and compiles the patterns)
Patterns = dict[str, list[str]]


@dataclass(frozen=True)
class Configuration:
    """[configurations.<name>]: rules of its own (and of those it extends), or a shipped profile's."""

    description: str = ""
    profile: str | None = None  # profiles/<profile>.env: its rules come from the profile rules
    extends: tuple[str, ...] = ()
    must: Patterns = field(default_factory=dict)
    must_not: Patterns = field(default_factory=dict)
    engine: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfileRuleTable:
    """[[profile_rule]]: patterns that apply when a profile's values match `when` (one value or a list)."""

    when: dict[str, str | list[str]]
    name: str = ""
    must: Patterns = field(default_factory=dict)
    must_not: Patterns = field(default_factory=dict)
    engine: dict[str, str] = field(default_factory=dict)
    source: str = ""  # the log or source that shows the rule holds


@dataclass(frozen=True)
class RulesFile:
    configurations: dict[str, Configuration] = field(default_factory=dict)
    profile_rule: tuple[ProfileRuleTable, ...] = ()
    schema: Literal[1] = 1


def load(path: Path) -> RulesFile:
    return config.load_toml(RulesFile, path)
