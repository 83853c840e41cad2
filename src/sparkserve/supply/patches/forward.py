"""Upstream-ready branches: for each upstream, a git tree of its pinned sdist (the same tree `patches
check` builds) with the patches whose DEP-3 `Forward:` says ready, one commit each, on a branch a
maintainer can review as a pull request. Commit messages are upstream's kind: the Description, the
author from the header, no project fields (Gate, Proof, Verified-On stay in patches/)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil, sourcetree
from sparkserve.supply.patches import apply
from sparkserve.supply.patches.series import Patch
from sparkserve.supply.pins import Pins

_AUTHOR = re.compile(r"^(?P<name>[^<]+?)\s*<(?P<email>[^>]+)>$")


def branch_name(version: str) -> str:
    return f"sparkserve-forward-{version}"


@dataclass
class Branch:
    upstream: str
    tree: Path
    branch: str
    commits: list[str] = field(default_factory=list)  # patch ids, in order
    held_back: dict[str, str] = field(default_factory=dict)  # patch id -> why it is not ready


def message(patch: Patch) -> str:
    """The commit message a pull request would carry: the Description (DEP-3 continuation lines
    unfolded), then where the change comes from."""
    desc = patch.header.fields["Description"].split("\n")
    subject, body = desc[0].strip(), "\n".join(line.rstrip() for line in desc[1:]).strip("\n")
    text = subject + "\n\n" + (body + "\n\n" if body else "")
    return text + f"Ready to forward: {patch.header.forward_why}\n"


def _author(patch: Patch) -> tuple[str, str]:
    m = _AUTHOR.match(patch.header.fields.get("Author", "").strip())
    return (m.group("name"), m.group("email")) if m else gitutil.IDENTITY


def write(pins: Pins, name: str, sdist: Path, patches: list[Patch], out: Path) -> Branch:
    """out/<name>: the pinned sdist as commit `upstream`, then the ready patches on a branch."""
    up = pins.upstream(name)
    tree = sourcetree.make(sdist, out / name, up)
    result = Branch(name, tree, branch_name(up.version))
    gitutil.run(["checkout", "-q", "-b", result.branch], tree)
    for patch in patches:
        if not patch.header.forward_ready:
            result.held_back[patch.id] = patch.header.forward_why
            continue
        try:
            apply._git_apply(patch, tree, ["--index"], None)
        except SparkserveError as exc:
            raise SparkserveError(
                f"{name}/{patch.id} is marked ready to forward but does not apply to the pinned "
                f"{up.distribution} {up.version} without the patches held back before it "
                f"({', '.join(result.held_back) or 'none'}): {exc}") from None
        who = _author(patch)
        with tempfile.NamedTemporaryFile("w", suffix=".msg", delete=False) as f:
            f.write(message(patch))
        try:
            gitutil.run(["commit", "-q", "--no-verify", "--cleanup=verbatim", "-F", f.name], tree,
                        date=apply._commit_date(patch),
                        extra_env={"GIT_AUTHOR_NAME": who[0], "GIT_AUTHOR_EMAIL": who[1]})
        finally:
            Path(f.name).unlink()
        result.commits.append(patch.id)
        say(f"  {name}/{patch.id}: committed on {result.branch}")
    return result
