"""A tiny random-weight Llama checkpoint, made offline, for CPU plumbing tests.

`python -m sparkserve_lab.testing tiny-model --out DIR` writes a directory that vLLM (CPU build),
transformers and llama-benchy load like any Hugging Face model:

- `config.json` / `generation_config.json`: `LlamaForCausalLM`, a few layers, float32 weights;
- `model.safetensors`: seeded random weights (numpy + safetensors, no torch needed);
- `tokenizer.json` / `tokenizer_config.json` / `special_tokens_map.json`: a byte-level BPE trained at
  run time on a deterministic pseudo-English corpus (so any text tokenizes), Llama-3-style special tokens
  and a chat template.

The weights are random: the output is gibberish by design. Two properties are engineered so benchmarks
are not cut short: the end-of-turn / end-of-text rows of `lm_head` are zero while all other rows are large,
so a sampled end token is vanishingly rare (about 1e-5 per token) and generation runs to `max_tokens`.
Needs the `cpu-serve` extra (`pip install 'sparkserve-lab[cpu-serve]'`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab.bench.book import corpus

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
HEADER_START, HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, EOS, HEADER_START, HEADER_END, EOT, "<|pad|>"]

# A Llama-3-shaped template: works with vLLM's chat endpoint and `apply_chat_template`.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | map(attribute='text') | join('') %}{% endif %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ content }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

@dataclass(frozen=True)
class TinySpec:
    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    # head_dim = hidden / heads must be 64 or more: vLLM's CPU attention has no kernel for head_dim 16.
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    max_position_embeddings: int = 16384
    seed: int = 0


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SparkserveError(
            f"tiny-model needs {module.split('.')[0]}: pip install 'sparkserve-lab[cpu-serve]'"
        ) from exc


def build_tokenizer(vocab_size: int, seed: int = 0) -> Any:
    """A byte-level BPE (every byte is a token, so any text encodes) trained on `corpus()`."""
    tk = _need("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(60_000, seed).splitlines(), trainer=trainer)
    # The template inserts the BOS token itself; no post-processor, so encode() adds nothing.
    return tok


def _weights(spec: TinySpec, vocab: int, special_ids: list[int]) -> dict[str, Any]:
    np = _need("numpy")
    rng = np.random.default_rng(spec.seed)
    h, inter = spec.hidden_size, spec.intermediate_size
    head_dim = h // spec.num_attention_heads
    kv = spec.num_key_value_heads * head_dim

    def normal(*shape: int, std: float = 0.02) -> Any:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w: dict[str, Any] = {"model.embed_tokens.weight": normal(vocab, h, std=1.0)}
    for i in range(spec.num_hidden_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = normal(h, h)
        w[p + "self_attn.k_proj.weight"] = normal(kv, h)
        w[p + "self_attn.v_proj.weight"] = normal(kv, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, h)
        w[p + "mlp.gate_proj.weight"] = normal(inter, h)
        w[p + "mlp.up_proj.weight"] = normal(inter, h)
        w[p + "mlp.down_proj.weight"] = normal(h, inter)
    w["model.norm.weight"] = np.ones(h, np.float32)
    # The final norm gives hidden states of RMS 1, so a row of std s gives logits of std ~ s*sqrt(h).
    # Logit std ~3 for ordinary tokens and exactly 0 for the special ones: P(special) ~ 1/(V*e^4.5).
    lm_head = normal(vocab, h, std=3.0 / h**0.5)
    lm_head[special_ids] = 0.0
    w["lm_head.weight"] = lm_head
    return w


def make(out: Path, spec: TinySpec | None = None) -> Path:
    """Write the checkpoint to `out` (created; existing files are overwritten). Returns `out`."""
    spec = spec or TinySpec()
    if spec.hidden_size % spec.num_attention_heads or spec.num_attention_heads % spec.num_key_value_heads:
        raise SparkserveError("hidden_size must divide by heads, and heads by kv heads")
    if spec.hidden_size // spec.num_attention_heads not in (64, 80, 96, 112, 128, 256):
        raise SparkserveError("head_dim (hidden/heads) must be one vLLM's CPU attention supports, e.g. 64")
    st = _need("safetensors.numpy")
    out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(spec.vocab_size, spec.seed)
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    tok.save(str(out / "tokenizer.json"))

    added = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t, i in ids.items()
    }
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOT,
            "pad_token": "<|pad|>",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": spec.max_position_embeddings,
            "added_tokens_decoder": added,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(out / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOT, "pad_token": "<|pad|>"})

    _write_json(
        out / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": vocab,
            "hidden_size": spec.hidden_size,
            "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads,
            "head_dim": spec.hidden_size // spec.num_attention_heads,
            "max_position_embeddings": spec.max_position_embeddings,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "bos_token_id": ids[BOS],
            "eos_token_id": [ids[EOT], ids[EOS]],
            "pad_token_id": ids["<|pad|>"],
            "torch_dtype": "float32",
            "initializer_range": 0.02,
        },
    )
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": ids[BOS],
            "eos_token_id": [ids[EOT], ids[EOS]],
            "pad_token_id": ids["<|pad|>"],
        },
    )
    st.save_file(
        _weights(spec, vocab, list(ids.values())), str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    # safetensors writes 0600: the image's serving user (another uid) must be able to read the model
    (out / "model.safetensors").chmod(0o644)
    _write_json(
        out / "sparkserve-tiny-model.json",
        {"made_by": "python -m sparkserve_lab.testing tiny-model", **asdict(spec),
         "vocab_size_actual": vocab},
    )
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
