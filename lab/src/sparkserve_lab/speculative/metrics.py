"""vLLM's speculative-decoding counters from a server's Prometheus endpoint (/metrics): drafts, draft tokens
and accepted tokens since the engine started. The acceptance length of a span is 1 + accepted / drafts
(vLLM's "mean acceptance length" counts the target's own token of each verify step)."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from sparkserve.errors import SparkserveError

# vLLM 0.33.0's names (vllm/v1/spec_decode/metrics.py); Prometheus counters gain `_total` when exported.
NAMES = {"drafts": "vllm:spec_decode_num_drafts", "draft_tokens": "vllm:spec_decode_num_draft_tokens",
         "accepted": "vllm:spec_decode_num_accepted_tokens"}


@dataclass(frozen=True)
class Counters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0

    def __sub__(self, before: Counters) -> Counters:
        return Counters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                        self.accepted - before.accepted)

    @property
    def acceptance_length(self) -> float | None:
        """Tokens per verify step, or None when nothing was drafted."""
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    def to_dict(self) -> dict[str, float | None]:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "acceptance_length": self.acceptance_length, "acceptance_rate": self.acceptance_rate}


def parse(text: str) -> Counters:
    """The counters of a /metrics page, summed over their label sets (absent: 0, speculation off).
    Parsed as Prometheus's text format by prometheus_client's own parser (escaped label values, comments,
    exemplars and _created samples handled as the format defines them)."""
    keys = {metric: key for key, metric in NAMES.items()}
    sums = dict.fromkeys(NAMES, 0.0)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = keys.get(sample.name.removesuffix("_total"))
                if key is not None:
                    sums[key] += sample.value
    except ValueError as exc:
        raise SparkserveError(f"/metrics: not Prometheus text format: {exc}") from None
    return Counters(**sums)


def read(base_url: str, timeout: float = 10) -> Counters:
    url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return parse(r.read().decode(errors="replace"))
    except (urllib.error.URLError, OSError) as exc:
        raise SparkserveError(f"cannot read {url}: {exc}") from None
