"""What a tactic index of FlashInfer's CUTLASS fused MoE means.

FlashInfer's runner (csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu) numbers its
tactics in one list, the GEMM1 candidates and then the GEMM2 candidates; `profile_ids` and the autotuner
store these absolute indices, and -1 means the first candidate of the GEMM (FlashInfer's default
profile). The candidates are MoeGemmRunner::getTmaWarpSpecializedConfigs (moe_gemm_template_dispatch.h)
over get_candidate_configs_sm90/_sm120 (cutlass_heuristic.cpp): per GEMM the base configs, for GEMM2 a
FINALIZE-fused copy of each when the top-k reduction is fused into its epilogue, then a SwapAB copy of
every config; the SM90 mixed-input GEMM keeps only the SwapAB copies. The binding has no call that
describes an index, so this module replays that enumeration for the paths sparkserve serves and tells
the variants of one path apart by the counts the runner reports (get_gemm1/2_tactic_count).
"""

from __future__ import annotations

from dataclasses import dataclass

Shape3 = tuple[int, int, int]

SM120_MXFP8_MXFP4 = "sm120-mxfp8-mxfp4"
SM90_BF16_MXFP4 = "sm90-bf16-mxfp4"
# path -> what it is (also the message for a GPU or backend without these kernels)
PATHS = {
    SM120_MXFP8_MXFP4: "SM120/SM121 block-scaled grouped GEMM, MXFP8 activations x MXFP4 weights, "
                       "UE8M0 scales (DGX Spark GB10, RTX PRO 6000 / RTX 5090; vLLM "
                       "FLASHINFER_CUTLASS_MXFP4_MXFP8)",
    SM90_BF16_MXFP4: "SM90 mixed-input grouped GEMM, BF16 activations x MXFP4 weights (H100 / H200; vLLM "
                     "FLASHINFER_CUTLASS_MXFP4_BF16)",
}


@dataclass(frozen=True)
class Tactic:
    index: int  # absolute: GEMM2 tactics follow the GEMM1 ones
    gemm: int  # 1 or 2
    tile: Shape3  # CUTLASS CTA tile M x N x K (with swap_ab, M is the weight rows and N the tokens)
    cluster: Shape3 = (1, 1, 1)
    schedule: str = "auto"  # mainloop schedule: auto, cooperative, pingpong
    finalize: bool = False  # top-k reduction fused into the GEMM2 epilogue
    swap_ab: bool = False

    def label(self) -> str:
        parts = ["x".join(map(str, self.tile)), "swap_ab" if self.swap_ab else "no_swap"]
        if self.finalize:
            parts.append("finalize")
        if self.cluster != (1, 1, 1):
            parts.append("cluster " + "x".join(map(str, self.cluster)))
        if self.schedule != "auto":
            parts.append(self.schedule)
        return " ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "gemm": self.gemm, "tile": list(self.tile),
                "cluster": list(self.cluster), "schedule": self.schedule, "finalize": self.finalize,
                "swap_ab": self.swap_ab, "label": self.label()}


@dataclass(frozen=True)
class TacticList:
    path: str
    variant: str
    gemm1: tuple[Tactic, ...]
    gemm2: tuple[Tactic, ...]

    @property
    def counts(self) -> tuple[int, int]:
        return len(self.gemm1), len(self.gemm2)

    def all(self) -> tuple[Tactic, ...]:
        return self.gemm1 + self.gemm2

    def get(self, index: int, gemm: int) -> Tactic:
        """The tactic an absolute index (or -1, the default) selects for GEMM `gemm`."""
        own = self.gemm1 if gemm == 1 else self.gemm2
        if index == -1:
            return own[0]
        hits = [t for t in own if t.index == index]
        if not hits:
            lo, hi = own[0].index, own[-1].index
            raise KeyError(f"{self.path}: {index} is no GEMM{gemm} tactic (GEMM{gemm} has {lo}..{hi})")
        return hits[0]


@dataclass(frozen=True)
class _Config:
    tile: Shape3
    cluster: Shape3 = (1, 1, 1)
    schedule: str = "auto"
    finalize: bool = False
    swap_ab: bool = False


def _number(configs: list[_Config], gemm: int, start: int) -> tuple[Tactic, ...]:
    return tuple(Tactic(start + i, gemm, c.tile, c.cluster, c.schedule, c.finalize, c.swap_ab)
                 for i, c in enumerate(configs))


def _with_swap_copies(configs: list[_Config]) -> list[_Config]:
    return configs + [_Config(c.tile, c.cluster, c.schedule, c.finalize, True) for c in configs]


# ---- SM120/SM121, FP8 activations x FP4 weights (FP8FP4_MIXED | GROUPED_GEMM | BLACKWELL) ----------------
# get_candidate_configs_sm120: all_tiles in declaration order, minus the tiles that never dispatch for a
# grouped GEMM with FP8 activations (128x128x256, 256x128x128 and every ...x64 K tile).
SM120_FP8_TILES: tuple[Shape3, ...] = ((128, 128, 128), (128, 32, 128), (128, 64, 128))
# flashinfer patch 0002 appends N = 8 and N = 16 tiles that are built only as SwapAB kernels.
SM120_NARROW_TILES: tuple[Shape3, ...] = ((128, 8, 128), (128, 16, 128))


def _sm120(tiles: tuple[Shape3, ...], swap_only: tuple[Shape3, ...]) -> tuple[list[_Config], list[_Config]]:
    base = [_Config(t) for t in tiles]
    gemm1 = _with_swap_copies(base)
    # GEMM2 of this runner fuses the finalize (use_fused_finalize, the default): FINALIZE copies follow.
    gemm2 = _with_swap_copies(base + [_Config(t, finalize=True) for t in tiles])

    def keep(c: _Config) -> bool:
        return c.swap_ab or c.tile not in swap_only

    return [c for c in gemm1 if keep(c)], [c for c in gemm2 if keep(c)]


# ---- SM90, BF16 activations x MXFP4 weights (WEIGHT_ONLY | GROUPED_GEMM | HOPPER), mixed input ----------
SM90_WEIGHT_ONLY_GROUPED_TILES: tuple[Shape3, ...] = (
    (64, 16, 128), (64, 16, 256), (64, 16, 512), (64, 32, 128), (64, 32, 256), (64, 32, 512),
    (64, 64, 128), (64, 64, 256), (64, 64, 512), (64, 128, 128), (64, 128, 256), (64, 128, 512),
    (128, 16, 128), (128, 16, 256), (128, 16, 512), (128, 32, 128), (128, 32, 256), (128, 32, 512),
    (128, 64, 128), (128, 64, 256), (128, 64, 512), (128, 128, 128), (128, 128, 256), (128, 128, 512),
    (128, 256, 128), (128, 256, 256), (256, 128, 128), (256, 128, 256), (256, 256, 128),
)
SM90_CLUSTERS: tuple[Shape3, ...] = ((1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1))


def sm90_supports_cooperative(tile: Shape3) -> bool:
    """cutlass_heuristic.cpp sm90_supports_coop: else the mainloop runs pingpong."""
    m, n, k = tile
    if m == 128 and n in (16, 32, 64):
        return k in (128, 256, 512)
    if m == 128 and n in (128, 256):
        return k in (128, 256)
    if m == 256 and n == 128:
        return k in (128, 256)
    return m == 256 and n == 256 and k == 128


def _sm90_mixed() -> list[_Config]:
    configs = []
    for tile in SM90_WEIGHT_ONLY_GROUPED_TILES:
        schedule = "cooperative" if sm90_supports_cooperative(tile) else "pingpong"
        configs += [_Config(tile, cluster, schedule) for cluster in SM90_CLUSTERS]
    # No finalize fusion for the mixed-input GEMM; only the SwapAB copies are kept.
    return [c for c in _with_swap_copies(configs) if c.swap_ab]


def _build(path: str, variant: str, gemm1: list[_Config], gemm2: list[_Config]) -> TacticList:
    return TacticList(path, variant, _number(gemm1, 1, 0), _number(gemm2, 2, len(gemm1)))


def known_lists(path: str) -> list[TacticList]:
    """Every tactic list sparkserve knows for `path` (the pinned FlashInfer, with and without the series'
    FlashInfer patches that change it)."""
    if path == SM120_MXFP8_MXFP4:
        return [
            _build(path, "flashinfer 0.7.2.post1", *_sm120(SM120_FP8_TILES, ())),
            _build(path, "flashinfer 0.7.2.post1 + N=8/16 SwapAB tiles",
                   *_sm120(SM120_FP8_TILES + SM120_NARROW_TILES, SM120_NARROW_TILES)),
        ]
    if path == SM90_BF16_MXFP4:
        mixed = _sm90_mixed()
        return [_build(path, "flashinfer 0.7.2.post1", mixed, list(mixed))]
    raise KeyError(f"unknown MoE path {path!r} (known: {', '.join(PATHS)})")


def resolve(path: str, gemm1_count: int, gemm2_count: int) -> TacticList | None:
    """The known list of `path` whose counts are those the runner reports, or None (an unknown build)."""
    hits = [t for t in known_lists(path) if t.counts == (gemm1_count, gemm2_count)]
    return hits[0] if hits else None


def path_for(major: int, minor: int, activation: str) -> str | None:
    """The path FlashInfer's CUTLASS fused MoE takes for MXFP4 weights on compute capability major.minor
    with `activation` ("mxfp8" or "bf16") activations, or None where it has none."""
    if major == 12 and activation == "mxfp8":
        return SM120_MXFP8_MXFP4
    if (major, minor) == (9, 0) and activation == "bf16":
        return SM90_BF16_MXFP4
    return None


def supported_text() -> str:
    return "; ".join(f"{p}: {d}" for p, d in PATHS.items())
