"""One-shot model download (`docker compose --profile tools run --rm download`): the profile's MODEL
(and its Eagle3 draft, SPECULATIVE_DRAFT, when SPECULATIVE=eagle3) into the Hugging Face cache, with
progress, then every file verified against the hub's own hashes
(sha256 for LFS files, the git blob id for the others), then the same presence check the server runs.

The hub is reached through huggingface_hub (in the image as a vLLM dependency), imported only here;
tests pass their own `Hub`.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sparkserve.errors import SparkserveError
from sparkserve.progress import ByteProgress, say
from sparkserve.serving import checkpoint
from sparkserve.serving import model as modelmod
from sparkserve.serving.profile import Profile, ProfileError

# gpt-oss repositories also hold the original checkpoint (original/) and a Metal build (metal/), each as
# large as the served weights; vLLM reads neither.
IGNORE = ("original/*", "metal/*")


class DownloadError(SparkserveError):
    """The download failed or a downloaded file does not match the hub's hash."""


@dataclass(frozen=True)
class Expected:
    """What the hub says a file is."""

    path: str
    size: int | None
    sha256: str | None  # LFS files
    git_oid: str | None  # the git blob id (sha1 of "blob <size>\\0" + content)


class Hub(Protocol):
    def download(self, repo_id: str, cache: Path, ignore: tuple[str, ...]) -> Path:
        """Download the repository's main revision into the cache; return the snapshot folder."""

    def files(self, repo_id: str, revision: str) -> list[Expected]:
        """The files of that revision with their hashes."""


def ignored(path: str, ignore: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in ignore)


def _hashes(path: Path, bar: ByteProgress) -> tuple[str, str]:
    sha256, git = hashlib.sha256(), hashlib.sha1(usedforsecurity=False)
    git.update(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        while block := f.read(8 << 20):
            sha256.update(block)
            git.update(block)
            bar.update(len(block))
    return sha256.hexdigest(), git.hexdigest()


def verify(snapshot: Path, expected: list[Expected], ignore: tuple[str, ...] = IGNORE) -> list[str]:
    """Problems of the downloaded snapshot against the hub's hashes (empty: every file matches)."""
    wanted = [e for e in expected if not ignored(e.path, ignore)]
    problems = [f"{e.path}: missing" for e in wanted if not (snapshot / e.path).is_file()]
    present = [e for e in wanted if (snapshot / e.path).is_file()]
    bar = ByteProgress("verify", sum((snapshot / e.path).stat().st_size for e in present) or None)
    for e in present:
        local = snapshot / e.path
        if e.size is not None and local.stat().st_size != e.size:
            problems.append(f"{e.path}: {local.stat().st_size} bytes, the hub says {e.size}")
            continue
        sha256, git_oid = _hashes(local, bar)
        if e.sha256 and sha256 != e.sha256:
            problems.append(f"{e.path}: sha256 {sha256}, the hub says {e.sha256}")
        elif not e.sha256 and e.git_oid and git_oid != e.git_oid:
            problems.append(f"{e.path}: git blob id {git_oid}, the hub says {e.git_oid}")
    bar.finish()
    return problems


def repos(p: Profile) -> list[str]:
    """The Hugging Face ids the profile serves from: MODEL, and the Eagle3 draft."""
    names = [p.model] + ([p.speculative_draft] if p.speculative == "eagle3" else [])
    return [n for n in names if not checkpoint.is_path(n)]


def run_all(p: Profile, env: Mapping[str, str], hub: Hub) -> list[tuple[str, Path]]:
    """Download and verify the profile's model and its draft (those that are ids); their snapshots."""
    wanted = repos(p)
    if not wanted:
        raise ProfileError("MODEL", p.model, "is a folder in the container: there is nothing to download; "
                                             "put the model there (a volume) or use a Hugging Face id")
    return [(repo, fetch(repo, checkpoint.hub_cache(env), hub)) for repo in wanted]


def run(p: Profile, env: Mapping[str, str], hub: Hub) -> Path:
    """Download and verify the profile's model (and its draft); return the first snapshot folder."""
    return run_all(p, env, hub)[0][1]


def fetch(repo: str, cache: Path, hub: Hub) -> Path:
    """Download one repository into the cache and verify every file against the hub's hashes."""
    say(f"downloading {repo} into {cache} (skipping {', '.join(IGNORE)}); an interrupted download "
        "resumes when run again")
    try:
        snapshot = hub.download(repo, cache, IGNORE)
    except SparkserveError:
        raise
    except Exception as exc:  # huggingface_hub's network, auth and disk errors
        raise DownloadError(f"download of {repo} failed: {type(exc).__name__}: {exc}") from None
    say(f"verifying {snapshot} against the hub's hashes")
    try:
        expected = hub.files(repo, snapshot.name)
    except Exception as exc:
        raise DownloadError(f"cannot read the file list of {repo}: {type(exc).__name__}: {exc}") from None
    problems = verify(snapshot, expected)
    if problems:
        raise DownloadError(f"{len(problems)} file(s) of {repo} do not match the hub: "
                            + "; ".join(problems[:5]) + ". Run the download again (it re-fetches them)")
    modelmod.cached_snapshot(cache, repo)
    return snapshot


class HuggingFaceHub:
    """The real hub, through huggingface_hub."""

    def download(self, repo_id: str, cache: Path, ignore: tuple[str, ...]) -> Path:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, cache_dir=cache, ignore_patterns=list(ignore)))

    def files(self, repo_id: str, revision: str) -> list[Expected]:
        from huggingface_hub import HfApi

        info: Any = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
        out = []
        for s in info.siblings or []:
            # BlobLfsInfo is a dict subclass with a sha256 attribute
            sha = getattr(s.lfs, "sha256", None) if s.lfs else None
            out.append(Expected(s.rfilename, s.size, sha, s.blob_id))
        return out
