"""ansible/README.md documents every variable of every role, and each role's argument specs know them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_specified_and_documented(role: str) -> None:
    defaults = yaml.safe_load((ANSIBLE / "roles" / role / "defaults/main.yml").read_text()) or {}
    spec_file = ANSIBLE / "roles" / role / "meta/argument_specs.yml"
    specs = yaml.safe_load(spec_file.read_text())["argument_specs"]
    specified = {k for ep in specs.values() for k in (ep.get("options") or {})}
    readme = (ANSIBLE / "README.md").read_text()
    assert set(defaults) <= specified, f"not in argument_specs: {set(defaults) - specified}"
    missing = [k for k in specified if f"| {role} | `{k}` |" not in readme]
    assert not missing, f"not in the README's variable table: {missing}"
    assert all(k.startswith(role + "_") for k in specified)


def test_layout_of_each_role() -> None:
    for role in ROLES:
        for part in (
            "defaults/main.yml",
            "tasks/main.yml",
            "handlers/main.yml",
            "meta/main.yml",
            "meta/argument_specs.yml",
        ):
            assert (ANSIBLE / "roles" / role / part).is_file(), f"{role}/{part}"
