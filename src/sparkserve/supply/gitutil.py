"""Run git with no user or system config, so diffs and commits are reproducible anywhere."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sparkserve.errors import SparkserveError

IDENTITY = ("sparkserve developers", "dev@sparkserve.invalid")


def env(date: str | None = None, name_email: tuple[str, str] = IDENTITY) -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME=name_email[0],
        GIT_AUTHOR_EMAIL=name_email[1],
        GIT_COMMITTER_NAME=name_email[0],
        GIT_COMMITTER_EMAIL=name_email[1],
        LC_ALL="C",
    )
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        e.pop(k, None)
    if date:
        e["GIT_AUTHOR_DATE"] = e["GIT_COMMITTER_DATE"] = date
    return e


def run(
    args: list[str],
    cwd: Path,
    *,
    check: bool = True,
    date: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    e = env(date)
    if extra_env:
        e.update(extra_env)
    proc = subprocess.run(["git", *args], cwd=cwd, env=e, capture_output=True, check=False)
    if check and proc.returncode != 0:
        raise SparkserveError(
            f"git {' '.join(args)} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc


def out(args: list[str], cwd: Path) -> str:
    return run(args, cwd).stdout.decode()


def commit_message(cwd: Path, rev: str) -> str:
    """The raw commit message, byte for byte (git log would reformat it)."""
    obj = run(["cat-file", "commit", rev], cwd).stdout.decode()
    return obj.split("\n\n", 1)[1]


def diff(cwd: Path, old: str, new: str) -> str:
    """The canonical diff form of a patch file."""
    return out(
        [
            "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
            "--full-index", "--diff-algorithm=myers", "--src-prefix=a/", "--dst-prefix=b/",
            old, new,
        ],
        cwd,
    )


def dirty(cwd: Path) -> list[str]:
    """Uncommitted changes, one 'XY path' line each (git status --porcelain): tracked files changed,
    staged or deleted, and untracked files that no ignore rule covers."""
    status = out(["status", "--porcelain=v1", "--untracked-files=normal"], cwd)
    return [ln for ln in status.splitlines() if ln]
