"""Level 1.5: does the engine run the kernels its configuration claims?

The expectations live in `lab/configs/engine-kernels.toml`, one table per configuration:

    [configurations.marlin-moe]
    description = "..."
    extends = ["gpt-oss"]              # optional: merge other configurations' rules first
    must = { moe = ["^MARLIN$"] }      # each pattern must match one selected name of the category
    must_not = { moe = ["CUTLASS"] }   # no selected name of the category may match
    engine = { device_config = "^cuda$" }   # fields of the "Initializing a V1 LLM engine" line

Categories are those of `logparse.CATEGORIES`, plus `log` (regexes on the raw log text) and `trace`
(kernel names of a torch profiler trace; checked only when a trace is given). A configuration that names
a shipped profile (`profile = "hopper-h100"`: it *is* profiles/hopper-h100.env) carries no rules of its
own: its rules are derived from that profile by the `[[profile_rule]]` tables (profile_rules.py), so a
profile and its configuration cannot disagree. A `must` category with no
selection line in the log fails: a kernel that cannot be seen is not proven. Patterns are Python regexes,
matched with `re.search`, case-sensitive.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.checks import Check
from sparkserve.errors import SparkserveError
from sparkserve_lab.validate import profile_rules, rulesfile
from sparkserve_lab.validate.logparse import EngineFacts, parse_text, read_log
from sparkserve_lab.validate.rules import KernelRules, pattern_table
from sparkserve_lab.validate.trace import kernel_names

RULES_FILE = Path("lab") / "configs" / "engine-kernels.toml"
@dataclass
class Validation:
    configuration: str
    valid: bool
    checks: list[Check]
    facts: EngineFacts
    sources: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.configuration,
            "valid": self.valid,
            "checks": [c.to_dict() for c in self.checks],
            "facts": self.facts.to_dict(),
            "sources": self.sources,
        }

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]


def load_kernel_rules(path: Path) -> dict[str, KernelRules]:
    raw = rulesfile.load(path).configurations
    if not raw:
        raise SparkserveError(f"{path}: no [configurations.<name>] tables")

    resolved: dict[str, KernelRules] = {}

    def resolve(name: str, stack: tuple[str, ...]) -> KernelRules:
        if name in resolved:
            return resolved[name]
        if name in stack:
            raise SparkserveError(f"{path}: `extends` cycle: {' -> '.join((*stack, name))}")
        t = raw.get(name)
        if t is None:
            raise SparkserveError(f"{path}: unknown configuration {name!r}")
        if t.profile is not None:
            resolved[name] = _of_profile(path, name, t)
            return resolved[name]
        exp = KernelRules(name, t.description)
        for parent in t.extends:
            base = resolve(parent, (*stack, name))
            for cat, pats in base.must.items():
                exp.must.setdefault(cat, []).extend(pats)
            for cat, pats in base.must_not.items():
                exp.must_not.setdefault(cat, []).extend(pats)
            exp.engine.update(base.engine)
        where = f"{path}: configurations.{name}"
        for cat, pats in pattern_table(f"{where}.must", t.must).items():
            exp.must.setdefault(cat, []).extend(pats)
        for cat, pats in pattern_table(f"{where}.must_not", t.must_not).items():
            exp.must_not.setdefault(cat, []).extend(pats)
        exp.engine.update(t.engine)
        resolved[name] = exp
        return exp

    for name in raw:
        resolve(name, ())
    return resolved


def _of_profile(path: Path, name: str, table: rulesfile.Configuration) -> KernelRules:
    """The rules of a configuration that is a shipped profile: the profile's own, as profile_rule tables
    give them (profiles/ of the checkout the rules file is in)."""
    from sparkserve.serving import profiles

    own = [key for key in ("extends", "must", "must_not", "engine") if getattr(table, key)]
    if own:
        raise SparkserveError(f"{path}: configurations.{name} names profile {table.profile!r} and rules "
                              f"of its own ({', '.join(own)}): its rules are the profile's, drop them")
    resolved = profiles.resolve(str(table.profile), _checkout_of(path))
    rules = profile_rules.rules_for(resolved.profile, profile_rules.load(path), name, resolved.env)
    rules.description = table.description
    return rules


def check(exp: KernelRules, log_text: str, trace_kernels: list[str] | None = None) -> Validation:
    facts = parse_text(log_text)
    checks: list[Check] = []

    if facts.lines == 0:
        checks.append(Check("engine log is not empty", False, "the log has no lines"))
    checks.append(
        Check("no fatal engine errors", not facts.fatal_errors, "; ".join(facts.fatal_errors[:3]) or "none")
    )

    def pool(cat: str) -> list[str] | None:
        if cat == "trace":
            return trace_kernels
        if cat == "log":
            return None  # handled separately
        return facts.selected.get(cat, [])

    for cat, pats in exp.must.items():
        for p in pats:
            label = f"{cat} must match /{p}/"
            if cat == "log":
                ok = re.search(p, log_text, re.MULTILINE) is not None
                checks.append(Check(label, ok, "found in log" if ok else "not in log"))
                continue
            names = pool(cat)
            if names is None:
                checks.append(Check(label, None, "skipped: no profiler trace given"))
                continue
            if not names:
                checks.append(
                    Check(
                        label,
                        False,
                        f"no {cat} selection seen" + (" in the trace" if cat == "trace" else " in the log"),
                    )
                )
                continue
            hit = [n for n in names if re.search(p, n)]
            checks.append(Check(label, bool(hit), f"selected: {', '.join(names)}"))

    for cat, pats in exp.must_not.items():
        for p in pats:
            label = f"{cat} must not match /{p}/"
            if cat == "log":
                m = re.search(p, log_text, re.MULTILINE)
                checks.append(Check(label, m is None, f"found: {m.group(0)!r}" if m else "absent"))
                continue
            names = pool(cat)
            if names is None:
                checks.append(Check(label, None, "skipped: no profiler trace given"))
                continue
            hit = [n for n in names if re.search(p, n)]
            checks.append(
                Check(
                    label,
                    not hit,
                    f"offending: {', '.join(hit)}" if hit else f"selected: {', '.join(names) or '-'}",
                )
            )

    for key, p in exp.engine.items():
        label = f"engine {key} must match /{p}/"
        val = facts.engine.get(key)
        if val is None:
            checks.append(Check(label, False, "no 'Initializing a V1 LLM engine' line with that field"))
        else:
            checks.append(Check(label, re.search(p, val) is not None, f"{key}={val}"))

    valid = all(c.ok is not False for c in checks)
    return Validation(exp.name, valid, checks, facts, {})


def validate_log(rules: KernelRules, rules_file: Path, log: Path, trace: Path | None = None) -> Validation:
    """Level 1.5 of one engine log (and optional profiler trace) against resolved rules."""
    try:
        text = read_log(log)
    except OSError as exc:
        raise SparkserveError(f"cannot read engine log {log}: {exc}") from exc
    kernels = kernel_names(trace) if trace else None
    result = check(rules, text, kernels)
    result.sources = {
        "engine_log": str(log),
        "engine_log_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "trace": str(trace) if trace else None,
        "expectations": str(rules_file),
        "expectations_sha256": hashlib.sha256(rules_file.read_bytes()).hexdigest(),
        "rules": rules.description,
    }
    return result


def validate_files(
    expectations: Path, configuration: str, log: Path, trace: Path | None = None
) -> Validation:
    """Level 1.5 against a named configuration of the rules file."""
    table = load_kernel_rules(expectations)
    if configuration not in table:
        raise SparkserveError(
            f"{expectations}: no configuration {configuration!r} (known: {', '.join(sorted(table))})"
        )
    return validate_log(table[configuration], expectations, log, trace)


def _checkout_of(rules_file: Path) -> Path:
    """The nearest folder above the rules file that holds profiles/ (the checkout: lab/configs/ is two
    levels below it)."""
    here = rules_file.resolve().parent
    for d in (here, *here.parents):
        if (d / "profiles").is_dir():
            return d
    raise SparkserveError(f"{rules_file}: no profiles/ folder above it to resolve its profiles in")
