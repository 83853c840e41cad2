"""sparkserve gptoss-dummy: the config-only gpt-oss checkpoint and its o200k_harmony tokenizer."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sparkserve_lab.testing import gptoss_dummy


def test_configs() -> None:
    big = gptoss_dummy.gpt_oss_config("120b")
    assert big["model_type"] == "gpt_oss" and big["vocab_size"] == gptoss_dummy.VOCAB_SIZE == 201088
    assert big["num_hidden_layers"] == 36 and big["num_local_experts"] == 128
    assert big["quantization_config"]["quant_method"] == "mxfp4"
    assert len(big["layer_types"]) == 36
    tiny = gptoss_dummy.gpt_oss_config("tiny")
    assert tiny["vocab_size"] == 201088 and "quantization_config" not in tiny
    assert tiny["hidden_size"] // tiny["num_attention_heads"] == tiny["head_dim"] == 64
    assert gptoss_dummy.gpt_oss_config("20b")["num_hidden_layers"] == 24


def test_byte_map_is_a_bijection() -> None:
    m = gptoss_dummy._bytes_to_unicode()
    assert len(m) == 256 and len(set(m.values())) == 256 and m[ord("A")] == "A" and m[ord(" ")] == "Ġ"


def test_merges_reproduce_the_ranks() -> None:
    ranks = {bytes([b]): b for b in range(256)}
    for i, tok in enumerate((b"ab", b"abc", b"bc", b"abcd"), start=256):
        ranks[tok] = i
    merges = gptoss_dummy._merges(ranks)
    assert merges == [(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"abc", b"d")]


def test_checkpoint_with_the_real_tokenizer(tmp_path: Path) -> None:
    """Builds o200k_harmony from openai_harmony (oss-harmony) and checks it (tokenizers, ~10 s)."""
    pytest.importorskip("openai_harmony")
    tk = pytest.importorskip("tokenizers")
    saved = tmp_path / "tok.json.gz"
    out = gptoss_dummy.make(tmp_path / "ckpt", "tiny", save=saved)
    tok = tk.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == 201088
    assert tok.id_to_token(200005) == "<|channel|>" and tok.id_to_token(201087) == "<|reserved_201087|>"
    meta = json.loads((out / "sparkserve-gptoss-dummy.json").read_text())
    assert meta["random_weights"] is True and meta["size"] == "tiny"
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["eos_token"] == "<|return|>" and "<|start|>" in tc["chat_template"]
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    # the shipped .gz is deterministic and gives the same checkpoint
    again = tmp_path / "tok2.json.gz"
    gptoss_dummy.make(tmp_path / "ckpt2", "120b", tokenizer_json=saved, save=again)
    assert saved.read_bytes() == again.read_bytes()
    assert gzip.decompress(saved.read_bytes()) == (out / "tokenizer.json").read_bytes()


def test_a_wrong_tokenizer_is_refused(tmp_path: Path) -> None:
    tk = pytest.importorskip("tokenizers")
    from sparkserve.errors import SparkserveError

    small = tk.Tokenizer(tk.models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    bad = tmp_path / "bad.json"
    small.save(str(bad))
    with pytest.raises(SparkserveError, match="want 201088"):
        gptoss_dummy.make(tmp_path / "ckpt", "120b", tokenizer_json=bad)
