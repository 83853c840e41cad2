"""What a checkpoint says it is: its config.json, in a model folder or in the Hugging Face cache.

A model is gpt-oss when its config.json says so (`model_type: gpt_oss`), whatever its folder or id is
called: a renamed folder and a config-only checkpoint (LOAD_FORMAT=dummy) are gpt-oss too. Only when no
config.json can be read (an id not downloaded yet, a folder not mounted) does the name decide.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GPT_OSS_MODEL_TYPE = "gpt_oss"
HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


def is_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~"))


def hub_cache(env: Mapping[str, str]) -> Path:
    """huggingface_hub's cache folder: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    home = env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def config_path(model: str, env: Mapping[str, str]) -> Path:
    """Where the model's config.json is (or would be): in the folder, or in the cached snapshot of main."""
    if is_path(model):
        return Path(model).expanduser() / "config.json"
    repo = repo_folder(hub_cache(env), model)
    try:
        commit = (repo / "refs" / "main").read_text().strip()
    except OSError:
        commit = "main"
    return repo / "snapshots" / commit / "config.json"


def config(model: str, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The model's config.json, or None when there is none to read."""
    try:
        data = json.loads(config_path(model, env).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_gpt_oss(model: str, env: Mapping[str, str]) -> bool:
    cfg = config(model, env)
    if cfg is not None:
        return cfg.get("model_type") == GPT_OSS_MODEL_TYPE
    return name_says_gpt_oss(model)


def name_says_gpt_oss(model: str) -> bool:
    """The fallback when no config.json is readable."""
    name = model.lower()
    return "gpt-oss" in name or "gpt_oss" in name
