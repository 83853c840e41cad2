"""The tiny random Llama (needs the cpu-serve extra: tokenizers, safetensors, numpy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkserve_lab.testing import tinymodel


def test_corpus_is_deterministic() -> None:
    assert tinymodel.corpus(500, 3) == tinymodel.corpus(500, 3)
    assert tinymodel.corpus(500, 3) != tinymodel.corpus(500, 4)


def test_make_tiny_model(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    np = pytest.importorskip("numpy")
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    out = tinymodel.make(tmp_path / "m", tinymodel.TinySpec(vocab_size=1024, max_position_embeddings=4096))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == 1024
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 64
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    text = "Hello, wörld! 123"
    assert tok.decode(tok.encode(text).ids) == text  # byte-level: any text round-trips
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert "<|start_header_id|>" in tc["chat_template"]
    w = load_file(str(out / "model.safetensors"))
    assert w["model.embed_tokens.weight"].shape == (1024, cfg["hidden_size"])
    eot = tok.token_to_id(tinymodel.EOT)
    assert not np.any(w["lm_head.weight"][eot])  # end tokens are never likely
    # every file readable by others: the image's serving user reads a model another uid wrote
    modes = {f.name: f.stat().st_mode for f in out.iterdir()}
    assert all(m & 0o004 for m in modes.values()), {n: oct(m) for n, m in modes.items()}
    again = tinymodel.make(tmp_path / "m2", tinymodel.TinySpec(vocab_size=1024, max_position_embeddings=4096))
    assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
