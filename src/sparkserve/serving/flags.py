"""The vLLM command line of a validated Profile: each setting's part (serving/settings.py declares which
flags each variable owns and how its value becomes them), in the table's order; vLLM's OpenAI server on
one node or a cluster's head, `vllm serve --headless` on a cluster's worker."""

from __future__ import annotations

import sys
from typing import Any

from sparkserve.serving import speculative, vllmconfig
from sparkserve.serving.settings import SETTINGS, Profile

SERVER_MODULE = vllmconfig.SERVER_MODULE
HEADLESS = vllmconfig.HEADLESS


def quantization_config(p: Profile) -> dict[str, object] | None:
    """vLLM's --quantization-config for the profile (serving/vllmconfig.py)."""
    return vllmconfig.quantization_config(p.mxfp4_layers, p.moe_backend)


def speculative_config(p: Profile) -> dict[str, Any] | None:
    """vLLM's --speculative-config for the profile, or None when SPECULATIVE=off."""
    return speculative.vllm_config(p.speculative, p.speculative_tokens, p.speculative_draft,
                                   p.speculative_synthetic_acceptance)


def profile_args(p: Profile) -> list[str]:
    """The arguments the profile's settings give vLLM, without VLLM_EXTRA_ARGS."""
    return [arg for s in SETTINGS for arg in s.argv.make(getattr(p, s.field), p)]


def vllm_argv(p: Profile, python: str = sys.executable) -> list[str]:
    """The command line: the server module, the profile's arguments, then VLLM_EXTRA_ARGS. A cluster's
    worker (node rank > 0) runs `vllm serve` with the same arguments and --headless: every rank builds
    vLLM's configuration from them (model, quantization, cache, compilation must agree across ranks),
    and headless vLLM starts no API server, so the server's own arguments have no effect there."""
    args = [*profile_args(p), *p.extra_args]
    if p.worker:
        return [python, "-m", vllmconfig.CLI_MODULE, "serve", *args, HEADLESS]
    return [python, "-m", SERVER_MODULE, *args]
