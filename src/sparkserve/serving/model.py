"""Is the profile's model there? Checked before vLLM starts, so that a model missing offline is one clear
message (exit 4) instead of a hub retry loop or an engine traceback.

MODEL is either a folder in the container (an absolute path: it must hold config.json) or a Hugging Face
id (`org/name`). An id is looked up in the Hugging Face cache (the compose volume `hf-cache`) the way
huggingface_hub lays it out: `models--org--name/refs/main` names a snapshot whose config.json and every
weight shard its index lists are present. Online (HF_HUB_OFFLINE=0) vLLM may download it instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import caches
from sparkserve.serving.checkpoint import HF_ID, hub_cache, is_path, repo_folder
from sparkserve.serving.profile import Profile, ProfileError

DOWNLOAD_COMMAND = "docker compose --profile tools run --rm download"


class ModelMissing(SparkserveError):
    """The model is not where the profile says, and the server may not fetch it."""


def unreadable(exc: PermissionError) -> ModelMissing:
    """The image serves as an unprivileged user: a model copied in as root with private modes (0600 files,
    0700 or 0644 folders) is there but cannot be read. Say which path and how to open it up."""
    return ModelMissing(
        f"{exc.filename} is not readable by the serving user (uid {os.getuid()}, gid {os.getgid()}). Make "
        f"the model readable to it: on the host `sudo chmod -R a+rX <the folder or volume>`, or for the "
        f"hf-cache volume `{caches.chown_command('/data/huggingface')}`")


def missing_files(folder: Path) -> list[str]:
    """What a model folder (or a cache snapshot) lacks: config.json, weight shards its index lists, or any
    weights at all. Broken symlinks (a snapshot whose blob was never completed) count as missing."""
    if not (folder / "config.json").is_file():
        return ["config.json"]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return [f"{index.name} (unreadable)"]
        return [s for s in shards if not (folder / s).is_file()]
    if any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")):
        return []
    return ["weights (*.safetensors)"]


def cached_snapshot(cache: Path, repo_id: str, revision: str = "main") -> Path:
    """The complete snapshot of repo_id in the cache, or ModelMissing saying what is missing."""
    repo = repo_folder(cache, repo_id)
    ref = repo / "refs" / revision
    if not ref.is_file():
        raise ModelMissing(f"{repo_id} is not in the model cache {cache}")
    commit = ref.read_text().strip()
    snapshot = repo / "snapshots" / commit
    lacks = missing_files(snapshot) if snapshot.is_dir() else ["the snapshot folder"]
    if lacks:
        partial = sorted(p.name for p in (repo / "blobs").glob("*.incomplete"))
        why = f" ({len(partial)} interrupted download(s) in {repo / 'blobs'})" if partial else ""
        shown = ", ".join(lacks[:3]) + (f" and {len(lacks) - 3} more" if len(lacks) > 3 else "")
        raise ModelMissing(f"{repo_id} is only partly in the model cache {cache}: snapshot {commit[:12]} "
                           f"lacks {shown}{why}")
    return snapshot


def check(p: Profile, env: Mapping[str, str]) -> str:
    """Where the server will load the model from (for the log), or ModelMissing / ProfileError."""
    try:
        return _check(p, env)
    except PermissionError as exc:
        raise unreadable(exc) from None


def check_folder(env: Mapping[str, str]) -> None:
    """Before the profile is parsed: MODEL, when it is a folder, is there with its config.json, or
    ModelMissing. parse() reads that config.json to know whether the model is gpt-oss; without it the
    folder's name decides, and a folder that is only not mounted would be refused as `not gpt-oss` (exit 2)
    instead of told to be mounted (exit 4). A Hugging Face id is left to check(): its name is what the
    profile is judged by until it is downloaded."""
    raw = env.get("MODEL", "").strip()
    if not is_path(raw):
        return
    folder = Path(raw).expanduser()
    try:
        if not folder.is_dir():
            raise not_mounted(raw)
        if not (folder / "config.json").is_file():
            raise ModelMissing(f"MODEL={raw}: the folder is not a complete model; it lacks config.json")
    except PermissionError as exc:
        raise unreadable(exc) from None


def not_mounted(model: str) -> ModelMissing:
    return ModelMissing(
        f"MODEL={model}: no such folder in the container. Mount the model folder there (compose: a "
        f"volume `- /host/folder:{model}:ro` on the serve and preflight services), or set MODEL to "
        f"a Hugging Face id and download it with `{DOWNLOAD_COMMAND}`")


def _check(p: Profile, env: Mapping[str, str]) -> str:
    model = p.model
    if is_path(model):
        folder = Path(model).expanduser()
        if not folder.is_dir():
            raise not_mounted(model)
        lacks = missing_files(folder)
        if p.load_format == "dummy":
            # random weights in the real shapes: the config (and tokenizer) are read, no weight file is
            lacks = [x for x in lacks if x == "config.json"]
        if lacks:
            raise ModelMissing(f"MODEL={model}: the folder is not a complete model; it lacks "
                               f"{', '.join(lacks[:3])}")
        dummy = " (LOAD_FORMAT=dummy: random weights)" if p.load_format == "dummy" else ""
        return f"local folder {folder}{dummy}"
    if not HF_ID.match(model):
        raise ProfileError("MODEL", model, "neither a folder in the container (an absolute path) nor a "
                                           "Hugging Face id like openai/gpt-oss-120b")
    if not p.offline:
        return f"{model} (online: vLLM downloads what the cache {hub_cache(env)} lacks)"
    cache = hub_cache(env)
    try:
        snapshot = cached_snapshot(cache, model)
    except ModelMissing as exc:
        raise ModelMissing(
            f"{exc}, and the server is offline (HF_HUB_OFFLINE=1, the default). Download it once with "
            f"`{DOWNLOAD_COMMAND}` (gpt-oss-120b: about 65 GB into the hf-cache volume), or mount a model "
            "folder and set MODEL to its path") from None
    return f"{model} from the cache, snapshot {snapshot.name[:12]} (offline)"
