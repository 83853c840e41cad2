"""Kernel classes of a decode step, from the name patterns of lab/configs/decode-kernel-classes.toml and, for
the kernels a name cannot place (dense GEMMs, MoE GEMMs that do not say which half they are), from
where they run in the layer."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve import config
from sparkserve.errors import SparkserveError

DEFAULT_FILE = Path("lab/configs/decode-kernel-classes.toml")

# The classes a breakdown reports, in the order of its tables and stacked bars.
ATTENTION = "attention"
MOE_GEMM1 = "moe-gemm1"
MOE_GEMM2 = "moe-gemm2"
ROUTER_TOPK = "router-topk"
ACTIVATION = "activation"
QKV_O = "qkv-o-gemm"
LM_HEAD = "lm-head"
NORMS = "norms-rope-residual"
SAMPLING = "sampling"
ALL_REDUCE = "all-reduce"
OTHER = "other"
CLASSES = (ATTENTION, MOE_GEMM1, MOE_GEMM2, ROUTER_TOPK, ACTIVATION, QKV_O, LM_HEAD, NORMS, SAMPLING,
           ALL_REDUCE, OTHER)

# The named groups of the step annotation: context (prefill) requests and tokens, generation requests and
# tokens of the step.
STEP_GROUPS = ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens")

# Pattern classes that are placed by position, and what they become.
GEMM = "gemm"  # resolve = "position": qkv-o-gemm, router-topk (the router GEMM) or lm-head
MOE_GEMM = "moe-gemm"  # resolve = "moe-order": moe-gemm1 or moe-gemm2
GEMM_TAIL = "gemm-tail"  # resolve = "previous": the class of the GEMM just before
GEMM_HEAD = "gemm-head"  # resolve = "next": the class of the GEMM just after
RESOLVERS = {"position": GEMM, "moe-order": MOE_GEMM, "previous": GEMM_TAIL, "next": GEMM_HEAD}
# A routing kernel that computes the gate's logits itself (`includes_gate = true`): reported as router-topk,
# but no GEMM before it is the router's.
ROUTER_WITH_GATE = "router-topk+gate"
# Kernels that mark where in a layer a GEMM runs.
LAYER_ANCHORS = (ATTENTION, MOE_GEMM1, MOE_GEMM2, MOE_GEMM)
ANCHORS = (*LAYER_ANCHORS, ROUTER_TOPK, ROUTER_WITH_GATE)


@dataclass(frozen=True)
class Rule:
    name: str
    patterns: tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...]
    step_annotation: re.Pattern[str]
    graph_launch: re.Pattern[str]
    sha256: str
    source: str

    def by_name(self, name: str) -> str:
        """The pattern class of a kernel name (possibly one still to be placed), or OTHER."""
        for r in self.rules:
            if any(p.search(name) for p in r.patterns):
                return r.name
        return OTHER


# The file's schema (sparkserve.config).
@dataclass(frozen=True)
class _Step:
    annotation: str  # the step's NVTX range name, with the batch's shape as named groups
    graph_launch: str = "^cu(da)?GraphLaunch"


@dataclass(frozen=True)
class _Class:
    name: str
    patterns: tuple[str, ...] = ()
    resolve: str | None = None  # placed by position: a key of RESOLVERS, for that resolver's class only
    includes_gate: bool = False  # router-topk only: the kernel computes the router's GEMM itself


@dataclass(frozen=True)
class _ClassesFile:
    step: _Step
    classes: tuple[_Class, ...] = field(default=(), metadata=config.renamed("class"))


def load(path: Path) -> Rules:
    try:
        raw = path.read_bytes()
        text = raw.decode()
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"kernel classes {path}: {exc}") from exc
    data = config.parse_toml(_ClassesFile, text, str(path))
    rules = []
    known = set(CLASSES) | {GEMM, MOE_GEMM, GEMM_TAIL, GEMM_HEAD}
    for i, c in enumerate(data.classes):
        if c.resolve is not None and RESOLVERS.get(c.resolve) != c.name:
            raise SparkserveError(f"{path}: class {c.name!r}: resolve {c.resolve!r} is not this class's "
                                  f"(known: {', '.join(f'{k} for {v}' for k, v in RESOLVERS.items())})")
        if c.name not in known:
            raise SparkserveError(f"{path}: class #{i + 1} {c.name!r} is not one of "
                                  f"{', '.join(sorted(known))}")
        if not c.patterns:
            raise SparkserveError(f"{path}: class {c.name!r} has no patterns")
        if c.includes_gate and c.name != ROUTER_TOPK:
            raise SparkserveError(f"{path}: class {c.name!r}: includes_gate is for {ROUTER_TOPK} only")
        try:
            patterns = tuple(re.compile(p, re.IGNORECASE) for p in c.patterns)
            rules.append(Rule(ROUTER_WITH_GATE if c.includes_gate else c.name, patterns))
        except re.error as exc:
            raise SparkserveError(f"{path}: class {c.name!r}: bad pattern: {exc}") from exc
    try:
        ann = re.compile(data.step.annotation)
        graph = re.compile(data.step.graph_launch)
    except re.error as exc:
        raise SparkserveError(f"{path}: [step] needs a valid `annotation` pattern ({exc})") from exc
    missing = [g for g in STEP_GROUPS if g not in ann.groupindex]
    if missing:
        raise SparkserveError(f"{path}: [step] annotation has no named group {', '.join(missing)} (the "
                              f"step's shape: {', '.join(STEP_GROUPS)})")
    if not rules:
        raise SparkserveError(f"{path}: no [[class]] entries")
    return Rules(tuple(rules), ann, graph, hashlib.sha256(raw).hexdigest(), str(path))


def _resolve_gemm(i: int, pattern_classes: list[str]) -> str:
    """A dense GEMM's class from the anchors around it (see the data file's header)."""
    layer = next((j for j in range(i + 1, len(pattern_classes)) if pattern_classes[j] in LAYER_ANCHORS), None)
    if layer is None:
        return LM_HEAD  # no attention or MoE after it in the step
    if pattern_classes[layer] == ATTENTION:
        return QKV_O
    nxt = next(j for j in range(i + 1, len(pattern_classes)) if pattern_classes[j] in ANCHORS)
    if pattern_classes[nxt] == ROUTER_WITH_GATE:
        return QKV_O  # the routing kernel is its own gate: every GEMM since attention is O's
    # before routing or an MoE GEMM: the last GEMM is the router's, earlier ones (after attention) are O
    later_gemm = any(pattern_classes[j] == GEMM for j in range(i + 1, nxt))
    return QKV_O if later_gemm else ROUTER_TOPK


def classify_sequence(names: list[str], rules: Rules) -> list[str]:
    """Final classes for the kernels of one step, in launch order."""
    pattern_classes = [rules.by_name(n) for n in names]
    out: list[str] = []
    moe_seen = 0  # MoE GEMMs since the last routing kernel
    for i, pc in enumerate(pattern_classes):
        if pc == GEMM_HEAD:
            cls = OTHER  # placed below, once the GEMM after it is known
        elif pc == GEMM:
            cls = _resolve_gemm(i, pattern_classes)
        elif pc == MOE_GEMM:
            cls = MOE_GEMM1 if moe_seen == 0 else MOE_GEMM2
        elif pc == GEMM_TAIL:
            cls = out[-1] if out and pattern_classes[i - 1] in (GEMM, GEMM_TAIL) else OTHER
        elif pc == ROUTER_WITH_GATE:
            cls = ROUTER_TOPK
        else:
            cls = pc
        if pc in (ROUTER_TOPK, ROUTER_WITH_GATE) or cls == ATTENTION:
            moe_seen = 0
        elif pc in (MOE_GEMM, MOE_GEMM1):
            moe_seen += 1
        out.append(cls)
    for i, pc in enumerate(pattern_classes):
        if pc == GEMM_HEAD:
            j = next((k for k in range(i + 1, len(pattern_classes)) if pattern_classes[k] != GEMM_HEAD), None)
            if j is not None and pattern_classes[j] == GEMM:
                out[i] = out[j]
    return out
