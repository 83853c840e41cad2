"""Level 1.5 for a serving profile: the kernel rules that follow from its variables.

`[[profile_rule]]` tables of lab/configs/engine-kernels.toml apply when their `when` matches the profile the
entrypoint resolves; their must / must_not / engine patterns add up to the rules a run of that profile
is validated against. `uncovered` names the claims of a profile no rule checks: the harness refuses to
measure such a configuration, and a unit test refuses such a shipped profile.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.serving.profile import Profile
from sparkserve.serving.settings import SETTINGS, Fact, Setting
from sparkserve_lab.validate import rulesfile
from sparkserve_lab.validate.rules import KernelRules, pattern_table

# `when` keys and how each reads the profile: the settings that declare a rule_key (serving/settings.py).


def _reader(s: Setting) -> Callable[[Profile], str]:
    return lambda p: s.kind.show(getattr(p, s.field))


_SCALAR: dict[str, Callable[[Profile], str]] = {s.rule_key: _reader(s) for s in SETTINGS if s.rule_key}
WHEN_KEYS = (*_SCALAR, "mxfp4", "not_mxfp4")
# `env.NAME`: an engine variable the served configuration sets (a profile file's or an A/B arm's VLLM_*,
# TORCHINDUCTOR_*, ...), compared as text; unset reads as "".
ENV_KEY = re.compile(r"^env\.[A-Z][A-Z0-9_]*$")


@dataclass
class ProfileRule:
    name: str
    when: dict[str, list[str]]
    must: dict[str, list[str]] = field(default_factory=dict)
    must_not: dict[str, list[str]] = field(default_factory=dict)
    engine: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def applies(self, p: Profile, env: Mapping[str, str] | None = None) -> bool:
        for key, values in self.when.items():
            if key.startswith("env."):
                if not _env_matches((env or {}).get(key[4:], ""), values):
                    return False
            elif key == "mxfp4":
                if not set(values) & p.mxfp4_layers:
                    return False
            elif key == "not_mxfp4":
                if set(values) & p.mxfp4_layers:
                    return False
            elif _SCALAR[key](p) not in values:
                return False
        return True


def _env_matches(value: str, values: list[str]) -> bool:
    """An engine variable's value against a rule's: equal, or a whole match of a value written
    `re:PATTERN` (a switch that takes a number, e.g. `re:[1-9][0-9]*` for any positive one)."""
    return any(re.fullmatch(v[3:], value) if v.startswith("re:") else v == value for v in values)


def load(path: Path) -> list[ProfileRule]:
    out = []
    for i, t in enumerate(rulesfile.load(path).profile_rule):
        where = f"{path}: profile_rule {i + 1} ({t.name or '?'})"
        if not t.when:
            raise SparkserveError(f"{where}: needs a `when` table")
        unknown = sorted(k for k in t.when if k not in WHEN_KEYS and not ENV_KEY.match(k))
        if unknown:
            raise SparkserveError(f"{where}: unknown `when` key(s) {unknown} (known: {', '.join(WHEN_KEYS)}, "
                                  "env.NAME)")
        when = {k: v if isinstance(v, list) else [v] for k, v in t.when.items()}
        out.append(ProfileRule(t.name or f"rule {i + 1}", when, pattern_table(f"{where}.must", t.must),
                               pattern_table(f"{where}.must_not", t.must_not), dict(t.engine), t.source))
    if not out:
        raise SparkserveError(f"{path}: no [[profile_rule]] tables")
    return out


def rules_for(p: Profile, rules: list[ProfileRule], label: str,
              env: Mapping[str, str] | None = None) -> KernelRules:
    """Every rule that applies to the profile (and the engine variables `env` of its configuration), merged
    into the rules of one configuration."""
    merged = KernelRules(label, "profile rules: " + ", ".join(r.name for r in rules if r.applies(p, env)))
    for r in rules:
        if not r.applies(p, env):
            continue
        for cat, pats in r.must.items():
            merged.must.setdefault(cat, []).extend(pats)
        for cat, pats in r.must_not.items():
            merged.must_not.setdefault(cat, []).extend(pats)
        for key, pat in r.engine.items():
            if key in merged.engine and merged.engine[key] != pat:
                raise SparkserveError(f"rules disagree on engine {key}: {merged.engine[key]!r} vs {pat!r} "
                                      f"({r.name})")
            merged.engine[key] = pat
    return merged


def _specific(patterns: list[str] | None) -> bool:
    """A pattern that names something, not just 'some kernel' (.+)."""
    return any(p not in (".+", ".*") for p in patterns or [])


def _mentions(patterns: list[str] | None, text: str) -> bool:
    return any(text in p for p in patterns or [])


def _holds(requirement: str, r: KernelRules) -> bool:
    """One requirement of a Fact (serving/settings.py) on the merged rules."""
    where, _, rest = requirement.partition(".")
    key, _, text = rest.partition("~")
    if where == "engine":
        return key in r.engine
    patterns = (r.must if where == "must" else r.must_not).get(key)
    if text:
        return _mentions(patterns, text)
    return _specific(patterns) if where == "must" else bool(patterns)


def _claim(s: Setting, fact: Fact, p: Profile) -> tuple[str, Callable[[KernelRules], bool]]:
    label = fact.label or f"{s.var}={s.kind.show(getattr(p, s.field))}"
    return label, lambda r: all(_holds(req, r) for req in fact.requires)


def claims(p: Profile) -> list[tuple[str, Callable[[KernelRules], bool]]]:
    """What the profile claims about the kernels (the facts its settings' values imply), each with the test
    that some rule checks it."""
    return [_claim(s, fact, p) for s in SETTINGS for fact in s.facts if fact.when(p)]


def uncovered(p: Profile, rules: list[ProfileRule]) -> list[str]:
    merged = rules_for(p, rules, "check")
    return [claim for claim, covered in claims(p) if not covered(merged)]


def describe(rules: list[ProfileRule], p: Profile,
             env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The rules a profile gets, for the run's validation record."""
    return [{"name": r.name, "source": r.source} for r in rules if r.applies(p, env)]
