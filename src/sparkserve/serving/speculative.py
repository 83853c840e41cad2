"""Speculative decoding as profile values: what the SPECULATIVE* variables accept, the vLLM
`--speculative-config` they become, and whether an Eagle3 draft's config.json fits the target's.

The JSON keys are vLLM 0.33.0's `SpeculativeConfig` fields (vllm/config/speculative.py): `method`,
`num_speculative_tokens`, `model` (the draft), and for measurements only `rejection_sample_method:
"synthetic"` with `synthetic_acceptance_length` (accepts draft tokens at a set mean rate without the
target's verdict, so the text is no longer the target's). Pure: no file or import of vLLM here; the checks
that read the cache are serving/draft.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# vLLM's suffix decoding is not offered: it imports Arctic Inference, which the locks do not carry.
METHODS = ("off", "eagle3", "ngram")
# The cost script measures k = 1..6 (lab/scripts/gpu/speculative-cost.sh); more is refused until measured.
TOKENS_MIN, TOKENS_MAX = 1, 8
# vLLM's recipe for gpt-oss on Hopper uses 3 speculative tokens with this draft (vllm-project/recipes,
# OpenAI/GPT-OSS.md; /work/shared/ANCHORS.md).
DEFAULT_TOKENS = 3
DEFAULT_EAGLE3_DRAFT = "nvidia/gpt-oss-120b-Eagle3-v2"
# The greedy identity check with an Eagle3 draft (k=3, random weights): token-identical with
# MXFP4_LAYERS=moe (H200), not with MXFP4 qkv/o/lm_head (H200, and the H100 run judged from top-20 lists
# named here; docs/GPU.md, section 7). The control of a later run with those layers (H200): the target
# without speculation changes its own greedy tokens as much when only the batch changes (prompts one at a
# time, then all at once), so on random weights the identity can be neither shown nor refuted there.
DENSE_MXFP4_IDENTITY_RECORD = ("lab/results/nvidia-h100-80gb-hbm3/20261127T001818Z-speculative-identity-"
                               "hopper-h100-speculative-eagle3-speculative_draft-tmp-gpt-oss-120b-eagle3")
DENSE_MXFP4_CONTROL_RECORD = ("lab/results/nvidia-h200-x4/20261127T035017Z-speculative-identity-"
                              "hopper-h100-speculative-eagle3-speculative_draft-tmp-gpt-oss-120b-eagle3")


def vllm_config(method: str, tokens: int | None, draft: str,
                synthetic: float | None) -> dict[str, Any] | None:
    """vLLM's --speculative-config for the profile's values, or None (off)."""
    if method == "off":
        return None
    cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": tokens}
    if method == "eagle3":
        cfg["model"] = draft
    if synthetic is not None:
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_length"] = synthetic
    return cfg


def synthetic_bounds(tokens: int) -> tuple[float, float]:
    """vLLM's range for synthetic_acceptance_length: 1 (no draft token accepted) to k + 1 (all of them)."""
    return 1.0, float(tokens + 1)


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = cfg.get("text_config")
    return inner if isinstance(inner, Mapping) else cfg


def _whole(cfg: Mapping[str, Any], key: str) -> int | None:
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fit_problems(target: Mapping[str, Any], draft: Mapping[str, Any]) -> list[str]:
    """Why an Eagle3 draft's config.json cannot serve the target's (empty: it fits).

    An Eagle3 head reads the target's hidden states (`target_hidden_size`, else its own `hidden_size`), of
    the layers `eagle_config.eagle_aux_hidden_state_layer_ids`, and proposes ids of the target's vocabulary
    (`vocab_size`; its own head may cover the first `draft_vocab_size` of them through a d2t map).
    """
    t, d = _text_config(target), _text_config(draft)
    problems = []
    t_vocab, d_vocab = _whole(t, "vocab_size"), _whole(d, "vocab_size")
    t_hidden = _whole(t, "hidden_size")
    d_hidden = _whole(d, "target_hidden_size") or _whole(d, "hidden_size")
    for name, value, whose in (("vocab_size", t_vocab, "the target"), ("hidden_size", t_hidden, "the target"),
                               ("vocab_size", d_vocab, "the draft"), ("hidden_size", d_hidden, "the draft")):
        if value is None:
            problems.append(f"{whose}'s config.json has no {name}")
    if t_vocab is not None and d_vocab is not None and t_vocab != d_vocab:
        problems.append(f"vocabulary: the draft's vocab_size is {d_vocab}, the target's {t_vocab}")
    draft_vocab = _whole(d, "draft_vocab_size")
    if draft_vocab is not None and d_vocab is not None and draft_vocab > d_vocab:
        problems.append(f"vocabulary: the draft's draft_vocab_size {draft_vocab} exceeds its vocab_size "
                        f"{d_vocab}")
    if t_hidden is not None and d_hidden is not None and t_hidden != d_hidden:
        problems.append(f"hidden size: the draft reads hidden states of width {d_hidden}, the target's "
                        f"hidden_size is {t_hidden}")
    layers = _whole(t, "num_hidden_layers")
    eagle = d.get("eagle_config")
    aux = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, Mapping) else None
    if layers is not None and isinstance(aux, list):
        outside = [i for i in aux if not isinstance(i, int) or not 0 <= i < layers]
        if outside:
            problems.append(f"layers: the draft reads the target's layers {aux}, the target has {layers}")
    return problems

