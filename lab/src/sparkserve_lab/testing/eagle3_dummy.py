"""A config-only Eagle3 draft for gpt-oss-120b: served with LOAD_FORMAT=dummy, vLLM gives it random weights
(the draft loads with the target's load format), so it proposes tokens the target almost never accepts:
speculation's cost at zero acceptance, and a greedy-identity check whose every draft token is rejected.

The shape is that of the published gpt-oss-120b Eagle3 drafts: one Llama decoder layer at the target's
width (hidden 2880, 64 query and 8 KV heads of 64), the target's vocabulary with a 32000-token draft head,
reading the target's layers 1, 17 and 33 (SpecForge's lab/configs/gpt-oss-120B-eagle3.json). The default
draft's own config.json (nvidia/gpt-oss-120b-Eagle3-v2) was not readable where this was written:
`--from-config` copies the shape of a real draft's config.json instead, so the fixture is the real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab.testing.gptoss_dummy import VOCAB_SIZE


def eagle3_config() -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 17, 33]},
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "intermediate_size": 17280,
        "max_position_embeddings": 4096,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB_SIZE,
        "draft_vocab_size": 32000,
    }


def make(out: Path, from_config: Path | None = None) -> Path:
    """Write `out/config.json` (no weights); from a real draft's config.json when given."""
    if from_config is not None:
        try:
            cfg = json.loads(from_config.read_text())
        except (OSError, ValueError) as exc:
            raise SparkserveError(f"{from_config}: not a readable config.json: {exc}") from None
        if not isinstance(cfg, dict):
            raise SparkserveError(f"{from_config}: not a JSON object")
    else:
        cfg = eagle3_config()
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out
