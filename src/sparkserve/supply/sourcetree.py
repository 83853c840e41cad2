"""Turn a pinned sdist into a git repository: the form developers patch and export from."""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve.supply import gitutil
from sparkserve.supply.pins import Upstream

UPSTREAM_TAG = "upstream"
TREE_EXCLUDES = (".sparkserve-manifest.json",)
# A tree is used from the host and from the dev container (another uid, another st_dev for the same files):
# git compares only mtime and size, or every `git status` on the other side would re-hash the whole tree.
TREE_CONFIG = {"core.checkStat": "minimal", "core.trustctime": "false"}


def configure(tree: Path) -> None:
    for key, value in TREE_CONFIG.items():
        gitutil.run(["config", key, value], tree)


def source_commit(tree_or_site: Path, up: Upstream) -> str | None:
    """The upstream commit recorded inside the sources (to check the pin against)."""
    if up.name == "vllm":
        f, pat = tree_or_site / "vllm/_version.py", r"commit_id\s*=\s*'g?([0-9a-f]+)'"
    else:
        f, pat = tree_or_site / "flashinfer/_build_meta.py", r'__git_commit__\s*=\s*"([0-9a-f]+)"'
    if not f.is_file():
        return None
    m = re.search(pat, f.read_text())
    return m.group(1) if m else None


def verify_commit(where: Path, up: Upstream) -> None:
    got = source_commit(where, up)
    if got is None or not (got.startswith(up.commit) or up.commit.startswith(got)):
        raise SparkserveError(
            f"{where}: sources say {up.name} commit {got}, pin upstream.{up.name}.commit is "
            f"{up.commit}"
        )


def base_description(up: Upstream) -> str:
    """What a tree's base commit says it was made from: the message `make` commits the sdist with."""
    return f"{up.distribution} {up.version} (sdist {up.sdist}, sha256 {up.sdist_sha256})"


class MissingTree(SparkserveError):
    """No source tree where one was expected."""


def recorded_base(tree: Path) -> str | None:
    """The first line of the base commit (tag 'upstream') of a tree, None if it has none."""
    if not (tree / ".git").exists():
        return None
    proc = gitutil.run(["log", "-1", "--format=%s", f"refs/tags/{UPSTREAM_TAG}"], tree, check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def verify_base(tree: Path, up: Upstream) -> None:
    """The tree exists, is a tree `make` made, and its base is the pinned sdist of `up`."""
    if not tree.exists():
        raise MissingTree(f"no source tree at {tree}: make the dev trees with `sparkserve dev init` "
                          "(git trees of the pinned sdists, the patch series as commits)")
    base = recorded_base(tree)
    if base is None:
        raise SparkserveError(f"{tree} is not a source tree made by `sparkserve dev init` (no git tag "
                              f"'{UPSTREAM_TAG}' with the sdist it was made from)")
    want = base_description(up)
    if base != want:
        raise SparkserveError(
            f"{tree} was made from {base}, but pins.toml pins upstream.{up.name} to {want}; refusing to "
            f"use it as the {up.name} tree. Give the tree of {up.name}, or make trees for the current "
            "pins (`sparkserve dev init --dir NEW`) and carry your commits over"
        )


def make(sdist: Path, dest: Path, up: Upstream) -> Path:
    """Extract the sdist into dest and commit it as the 'upstream' tag."""
    if dest.exists():
        raise SparkserveError(f"{dest} exists already; remove it or pick another directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    say(f"  extracting {sdist.name} -> {dest}")
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".extract-") as tmp, \
            tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
        root = Path(tmp) / up.sdist_root
        if not root.is_dir():
            raise SparkserveError(f"{sdist.name} has no top folder {up.sdist_root}")
        shutil.move(root, dest)
    verify_commit(dest, up)
    gitutil.run(["init", "-q", "-b", "main"], dest)
    configure(dest)
    exclude = dest / ".git/info/exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("".join(f"/{p}\n" for p in TREE_EXCLUDES))
    # -f: sdists ship files their own .gitignore lists (vllm/_version.py)
    gitutil.run(["add", "-A", "-f"], dest)
    gitutil.run(
        ["commit", "-q", "--no-verify", "-m", base_description(up)],
        dest, date="2000-01-01T00:00:00+00:00",
    )
    gitutil.run(["tag", UPSTREAM_TAG], dest)
    return dest
