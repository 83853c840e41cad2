"""Read an engine log and say which kernels vLLM selected.

Every pattern below is written against the exact format string in the pinned vLLM 0.33.0 source (the
sdist tree at commit 1895c23 of `sparkserve dev init`, i.e. before our patches) or in one of our patches;
the comment next to each names file:line. vLLM prefixes each message with
`(<Process> pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] `, so the patterns search, they do not anchor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# The categories a kernel expectation can refer to (configs/engine-kernels.toml).
CATEGORIES = ("moe", "attention", "linear", "lm_head", "sink_decode", "decode_backend")

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    # vllm/model_executor/layers/fused_moe/oracle/mxfp4.py:539  f"Using '{backend.value}' Mxfp4 MoE backend."
    ("moe", re.compile(r"Using '(?P<name>[A-Za-z0-9_]+)' Mxfp4 MoE backend\.")),
    # vllm/model_executor/layers/fused_moe/oracle/mxfp8.py:127 and :139
    #   "Using '%s' MxFp8 MoE backend (user-requested)." / "Using '%s' MxFp8 MoE backend."
    ("moe", re.compile(r"Using '(?P<name>[A-Za-z0-9_]+)' MxFp8 MoE backend")),
    # vllm/model_executor/layers/fused_moe/oracle/w4a8.py:96  "Using %s W4A8 MoE backend."
    ("moe", re.compile(r"Using (?P<name>[A-Za-z0-9_]+) W4A8 MoE backend\.")),
    # vllm/model_executor/layers/fused_moe/oracle/unquantized.py:530  "Using %s MoE backend"
    ("moe", re.compile(r"Using (?P<name>[A-Za-z0-9_]+) MoE backend(?:$|[^.\w])")),
    # vllm/platforms/cuda.py:509  "Using %s attention backend out of potential backends: %s."
    ("attention", re.compile(r"Using (?P<name>[A-Za-z0-9_]+) attention backend out of potential backends")),
    # vllm/platforms/cuda.py:448  "Using %s backend." with an AttentionBackendEnum member (str() gives
    # "AttentionBackendEnum.X") when --attention-backend is given; vllm/platforms/cpu.py:174/:186 (MLA on CPU)
    ("attention", re.compile(r"Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z][A-Z0-9_]+) backend\.\s*$")),
    # vllm/model_executor/kernels/linear/__init__.py:1004/:1091/:1144/:1259/:1303
    #   "Using %s for MXFP8 GEMM" / "... MXFP4 GEMM" / "... MXFP6 GEMM" / "... NVFP4 GEMM"
    ("linear", re.compile(r"Using (?P<name>[A-Za-z0-9_]+) for (?:MXFP4|MXFP6|MXFP8|NVFP4) GEMM")),
    # vllm/model_executor/kernels/linear/__init__.py:945  "Using %s for mixed-precision linear"
    ("linear", re.compile(r"Using (?P<name>[A-Za-z0-9_]+) for mixed-precision linear")),
    # patches/vllm (lm_head MXFP4), vllm/model_executor/layers/quantization/online/mxfp4.py:167 (patched tree)
    #   "lm_head quantized online to MXFP4 (group %d, E8M0) using %s."
    ("lm_head", re.compile(r"lm_head quantized online to MXFP4 \(group \d+, E8M0\) using (?P<name>\w+)\.")),
    # patches/vllm (offline sink path), vllm/v1/attention/backends/flashinfer.py:1141 (patched tree)
    #   "FlashInfer attention-sink decode kernel: %s (VLLM_FLASHINFER_SINK_DECODE=%s)."
    ("sink_decode", re.compile(r"FlashInfer attention-sink decode kernel: (?P<name>\w+) ")),
    # vllm/v1/attention/backends/flashinfer.py (0.33.0: "FlashInfer resolved query dtypes: prefill=%s,
    #   decode=%s, decode_backend=%s, kv_cache_dtype=%s, arch=%s")
    ("decode_backend", re.compile(r"FlashInfer resolved query dtypes: .*decode_backend=(?P<name>[\w-]+)")),
]

# vllm/v1/engine/core.py:140  "Initializing a V1 LLM engine (v%s) with config: %s"; the config is
# VllmConfig.__str__ (vllm/config/vllm.py:2809): "model='...', ..., dtype=torch.bfloat16, ...".
_ENGINE_LINE = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<cfg>.*)$")
_ENGINE_KEYS = (
    "model",
    "dtype",
    "max_seq_len",
    "load_format",
    "tensor_parallel_size",
    "quantization",
    "enforce_eager",
    "kv_cache_dtype",
    "device_config",
    "enable_prefix_caching",
    "enable_chunked_prefill",
)
# vllm/entrypoints/launchers/api_server/entry.py:139  "Starting vLLM server on %s"
_SERVER_START = re.compile(r"Starting vLLM server on (?P<addr>\S+)")
# vllm/v1/engine/core.py:1586/:2806  "EngineCore encountered a fatal error."
_FATAL = re.compile(r"EngineCore encountered a fatal error|EngineDeadError|CUDA error: |\bXid\b")
# patched online/mxfp4.py:181  "lm_head is not quantized online to MXFP4: %s."
_LM_HEAD_SKIP = re.compile(r"lm_head is not quantized online to MXFP4: (?P<reason>.*?)\.?\s*$")


@dataclass
class EngineFacts:
    """What one engine log says: selected kernels per category, the engine config, server starts."""

    selected: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CATEGORIES})
    engine: dict[str, str] = field(default_factory=dict)
    vllm_version: str | None = None
    server_starts: int = 0
    fatal_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "vllm_version": self.vllm_version,
            "engine": self.engine,
            "selected": self.selected,
            "server_starts": self.server_starts,
            "fatal_errors": self.fatal_errors[:20],
            "notes": self.notes,
            "lines": self.lines,
        }


def _engine_fields(cfg: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in _ENGINE_KEYS:
        m = re.search(rf"(?:^|, ){key}=('(?:[^']*)'|[^,]*)", cfg)
        if m:
            out[key] = m.group(1).strip("'")
    return out


def parse_text(text: str) -> EngineFacts:
    facts = EngineFacts()
    for raw in text.splitlines():
        facts.lines += 1
        line = raw.rstrip()
        m = _ENGINE_LINE.search(line)
        if m:
            facts.vllm_version = m.group("version")
            facts.engine = _engine_fields(m.group("cfg"))
            continue
        if _SERVER_START.search(line):
            facts.server_starts += 1
            continue
        if _FATAL.search(line):
            facts.fatal_errors.append(line)
            continue
        m = _LM_HEAD_SKIP.search(line)
        if m:
            facts.notes.append(f"lm_head stays unquantized: {m.group('reason')}")
            continue
        for category, pat in _PATTERNS:
            m = pat.search(line)
            if m:
                name = m.group("name")
                if name not in facts.selected[category]:
                    facts.selected[category].append(name)
                break
    return facts


def parse_file(path: Path) -> EngineFacts:
    return parse_text(path.read_text(errors="replace"))
