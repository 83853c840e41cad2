"""Level 1.5 of a stored run: which rules it answers to, and its validation.json.

A run made from a serving profile (level 6, `sparkserve ab`) records the profile's resolved environment
in its metadata (`profile`), so its rules are derived again from that profile; any other run names a
configuration of the rules file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkserve.progress import say
from sparkserve.serving.profile import parse
from sparkserve_lab.runstore import VALIDATION, Run, write_json
from sparkserve_lab.validate import profile_rules
from sparkserve_lab.validate.kernels import Validation, load_kernel_rules, validate_log
from sparkserve_lab.validate.rules import KernelRules


def profile_record(name: str, env: dict[str, str], overrides: dict[str, str]) -> dict[str, Any]:
    """What a run keeps of the profile it served (metadata `profile`)."""
    return {"name": name, "overrides": overrides, "env": env}


def rules_for(meta: dict[str, Any], configuration: str, rules_file: Path) -> KernelRules | None:
    """The rules of a run: from its profile when it has one, else its named configuration (None when
    the rules file has no such configuration: the run stays unvalidated)."""
    prof = meta.get("profile")
    if isinstance(prof, dict) and isinstance(prof.get("env"), dict):
        env = {str(k): str(v) for k, v in prof["env"].items()}
        return profile_rules.rules_for(parse(env), profile_rules.load(rules_file), configuration, env)
    return load_kernel_rules(rules_file).get(configuration)


def validate(run: Run, rules: KernelRules, rules_file: Path, log: Path, trace: Path | None) -> Validation:
    """Level 1.5 into the store: writes validation.json."""
    v = validate_log(rules, rules_file, log, trace)
    write_json(run.file(VALIDATION), v.to_dict())
    say_validation(v, run.file(VALIDATION))
    return v


def say_validation(v: Validation, written_to: Path | None = None) -> None:
    """Every check, then the verdict line of level 1.5."""
    for c in v.checks:
        say(c.line())
    verdict = f"level 1.5 (kernels, {v.configuration}): {'VALID' if v.valid else 'INVALID'}"
    say(verdict + (f" -> {written_to}" if written_to else ""))
