"""Token buckets of the sweep: FlashInfer's own for its CUTLASS MoE (flashinfer/fused_moe/utils.py
get_hybrid_num_tokens_buckets, which vLLM 0.33.0 tunes with for --max-num-batched-tokens): powers of two
to 256, steps of 256 to 2048, of 512 to 4096, then powers of two to the maximum. A call with n tokens runs
the tactic of the first bucket >= n (vLLM tunes with round_up=True; the table lookup does the same)."""

from __future__ import annotations

from sparkserve.errors import SparkserveError

MAX_TOKENS = 8192
# A quick set for a short GPU sitting: decode (1, 8), a mid batch (64) and a prefill chunk (512).
QUICK = (1, 8, 64, 512)


def hybrid(max_tokens: int = MAX_TOKENS) -> tuple[int, ...]:
    out: list[int] = []
    m = 1
    while m <= min(max_tokens, 256):
        out.append(m)
        m *= 2
    out += range(512, min(max_tokens, 2048) + 1, 256)
    out += range(2560, min(max_tokens, 4096) + 1, 512)
    m = 8192
    while m <= max_tokens:
        out.append(m)
        m *= 2
    if not out or out[-1] != max_tokens:
        out.append(max_tokens)
    return tuple(sorted(set(out)))


def parse(text: str, max_tokens: int = MAX_TOKENS) -> tuple[int, ...]:
    """`all` (FlashInfer's buckets up to max_tokens), `quick`, or a comma list of token counts."""
    if text == "all":
        return hybrid(max_tokens)
    if text == "quick":
        return QUICK
    try:
        values = sorted({int(v) for v in text.replace(" ", "").split(",") if v})
    except ValueError:
        why = f"--buckets: {text!r} is not all, quick or a comma list of token counts"
        raise SparkserveError(why) from None
    if not values or values[0] < 1:
        raise SparkserveError(f"--buckets: {text!r}: token counts must be at least 1")
    return tuple(values)
