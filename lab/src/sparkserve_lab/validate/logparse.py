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

from sparkserve.serving.moe import tactics as moe_tactics
from sparkserve_lab import gzfile

# The categories a kernel expectation can refer to (lab/configs/engine-kernels.toml).
CATEGORIES = ("moe", "attention", "linear", "lm_head", "sink_decode", "decode_backend", "moe_tactic")

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
    # SpeculativeConfig.__repr__ (vllm/config/speculative.py): "SpeculativeConfig(method='eagle3', model=...";
    # the field is read up to its first comma and unquoted: "SpeculativeConfig(method='eagle3" (None without)
    "speculative_config",
)
# vllm/entrypoints/launchers/api_server/entry.py:139  "Starting vLLM server on %s"
_SERVER_START = re.compile(r"Starting vLLM server on (?P<addr>\S+)")
# vllm/v1/engine/core.py:1586/:2806  "EngineCore encountered a fatal error."
_FATAL = re.compile(r"EngineCore encountered a fatal error|EngineDeadError|CUDA error: |\bXid\b")
# patched online/mxfp4.py:181  "lm_head is not quantized online to MXFP4: %s."
_LM_HEAD_SKIP = re.compile(r"lm_head is not quantized online to MXFP4: (?P<reason>.*?)\.?\s*$")
# patches/vllm 0004, vllm/model_executor/layers/fused_moe/experts/flashinfer_moe_tactics.py (log_choice)
#   "FlashInfer CUTLASS MoE tactics for %d tokens: gemm1=%d gemm2=%d of %s (%s; %s)."
# logged per token count when first seen and when it changes: the last line per token count holds.
_MOE_TACTICS = re.compile(
    r"FlashInfer CUTLASS MoE tactics for (?P<tokens>\d+) tokens: gemm1=(?P<g1>-?\d+) gemm2=(?P<g2>-?\d+) "
    r"of (?P<n1>\?|-?\d+)\+(?P<n2>\?|-?\d+) \((?P<kind>[^;]*); (?P<source>[^)]*)\)\.")
_MOE_KIND = re.compile(r"^(?P<act>\w+) x (?P<weight>\w+), sm(?P<major>\d{1,2}?)(?P<minor>\d)$")


@dataclass
class EngineFacts:
    """What one engine log says: selected kernels per category, the engine config, server starts."""

    selected: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CATEGORIES})
    engine: dict[str, str] = field(default_factory=dict)
    moe_tactics: dict[int, dict[str, object]] = field(default_factory=dict)  # token count -> the last line
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
            "moe_tactics": {str(k): v for k, v in sorted(self.moe_tactics.items())},
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


def _tactic_label(path: str | None, n1: str, n2: str, index: int, gemm: int) -> str:
    """128x32x128/swap_ab for an index of a tactic list sparkserve knows, else unknown#<index>."""
    listing = moe_tactics.resolve(path, int(n1), int(n2)) if path and n1.isdigit() and n2.isdigit() else None
    if listing is None:
        return f"unknown#{index}"
    try:
        return listing.get(index, gemm).label().replace(" ", "/")
    except KeyError:
        return f"unknown#{index}"


def moe_tactic_name(tokens: int, line: dict[str, object]) -> str:
    """The `moe_tactic` selection of one token count: 'tokens=1 gemm1=128x32x128/swap_ab
    gemm2=128x32x128/swap_ab source=autotuner'."""
    m = _MOE_KIND.match(str(line["kind"]))
    path = moe_tactics.path_for(int(m["major"]), int(m["minor"]), m["act"]) if m and m["weight"] == "mxfp4" \
        else None
    n1, n2 = str(line["n1"]), str(line["n2"])
    g1 = _tactic_label(path, n1, n2, int(str(line["gemm1"])), 1)
    g2 = _tactic_label(path, n1, n2, int(str(line["gemm2"])), 2)
    source = str(line["source"]).split(" ", 1)[0]
    return f"tokens={tokens} gemm1={g1} gemm2={g2} source={source}"


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
        m = _MOE_TACTICS.search(line)
        if m:
            facts.moe_tactics[int(m["tokens"])] = {"gemm1": int(m["g1"]), "gemm2": int(m["g2"]),
                                                   "n1": m["n1"], "n2": m["n2"], "kind": m["kind"],
                                                   "source": m["source"]}
            continue
        for category, pat in _PATTERNS:
            m = pat.search(line)
            if m:
                name = m.group("name")
                if name not in facts.selected[category]:
                    facts.selected[category].append(name)
                break
    facts.selected["moe_tactic"] = [moe_tactic_name(n, v) for n, v in sorted(facts.moe_tactics.items())]
    return facts


def read_log(path: Path) -> str:
    """A log's text; a name that ends in .gz is read through gzip (the run store keeps engine logs so)."""
    return gzfile.read_text(path)


def parse_file(path: Path) -> EngineFacts:
    return parse_text(read_log(path))
