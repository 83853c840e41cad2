"""What the test command leaves is what it says it leaves: every image a CI phase builds, tags or imports
is in lib.sh's CI_IMAGES (which scripts/ci/footprint.sh lists and SPARKSERVE_CI_CLEAN=1 removes) or is
removed by the phase itself; every compose project the phases and their tests make is covered by
CI_PROJECT_PREFIXES."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "scripts" / "ci"


def lib_values() -> tuple[list[str], list[str]]:
    """CI_IMAGES and CI_PROJECT_PREFIXES as bash sees them."""
    script = ('source scripts/ci/lib.sh >/dev/null; printf "%s\\n" "${CI_IMAGES[@]}"; echo --; '
              'printf "%s\\n" "${CI_PROJECT_PREFIXES[@]}"')
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    images, prefixes = out.stdout.split("--\n")
    return images.split(), prefixes.split()


def assignments(text: str) -> dict[str, str]:
    """NAME=value lines of a bash script (quotes dropped; the value may name other variables)."""
    return {name: value.strip('"') for name, value in
            re.findall(r'^\s*([A-Z_][A-Z0-9_]*)=("[^"]*"|[^\s(]\S*)', text, re.M)}


def made_images(text: str) -> list[str]:
    """What a script names as an image it makes: `build ... -t X`, `tag A X`, `ensure_base_image R X`."""
    out = re.findall(r'\bbuild\b[^\n]*?(?:\\\n[^\n]*?)*?-t\s+("?[^\s"]+"?)', text)
    out += re.findall(r'"\$DOCKER" tag \S+ ("?[^\s"]+"?)', text)
    out += re.findall(r'ensure_base_image \w+ ("?[^\s"]+"?)', text)
    out += re.findall(r'\bbuild_arm64 [\w-]+ ("?\$[^\s"]+"?)', text)  # 22-image-arm64.sh: TARGET TAG
    return [x.strip('"') for x in out]


def resolve(name: str, *scopes: dict[str, str]) -> str:
    """$NAME or ${NAME:-default} through the scripts' assignments."""
    m = re.fullmatch(r"\$\{?(\w+)(?::-([^}]*))?\}?", name)
    if not m:
        return name
    for scope in scopes:
        if m.group(1) in scope and scope[m.group(1)] != name:
            return resolve(scope[m.group(1)], *scopes)
    if m.group(2) is not None:
        return m.group(2)
    raise AssertionError(f"cannot resolve {name}")


def test_every_image_a_phase_makes_is_listed_or_removed_by_the_phase() -> None:
    images, _ = lib_values()
    lib = (CI / "lib.sh").read_text()
    lib_vars = assignments(lib)
    unlisted = []
    for script in sorted(CI.glob("*.sh")):
        text = re.sub(r"(^|\s)#.*$", "", script.read_text(), flags=re.M)  # comments out
        for made in made_images(text):
            if made == '$image' or re.fullmatch(r'\$\d', made):  # a helper's parameter: its callers are
                continue                                          # checked
            value = resolve(made, assignments(text), lib_vars)
            removed_here = re.search(r"image rm -f \"?" + re.escape(made), text) is not None
            if value not in images and not removed_here:
                unlisted.append(f"{script.name}: {made} = {value}")
    assert not unlisted, f"images a phase leaves that CI_IMAGES (lib.sh) does not list: {unlisted}"
    assert {"sparkserve/dev:ci", "ans-target:ci", "ans-serve-cpu:ci"} <= set(images)


def test_every_compose_project_of_the_tests_is_covered() -> None:
    _, prefixes = lib_values()
    projects = set(re.findall(r"serve_project_name: (\S+)", "\n".join(
        p.read_text() for p in (ROOT / "ansible" / "molecule").rglob("molecule.yml"))))
    bad_inputs = (ROOT / "tests/ansible/test_bad_inputs.py").read_text()
    projects |= set(re.findall(r'^PROJECT = "([^"]+)"', bad_inputs, re.M))
    compose_up = (ROOT / "tests/deploy/test_compose_up.py").read_text()
    projects |= set(re.findall(r'"SPARKSERVE_CI_PROJECT", "([^"]+)"', compose_up))
    projects |= set(re.findall(r"compose -p ([\w-]+)", (CI / "26-dev.sh").read_text()))
    assert {"ans-molecule", "ans-molecule-cluster", "ans-bad", "sparkserve-ci", "dev-ci"} <= projects
    for project in projects:
        assert any(project.startswith(p) for p in prefixes), project
