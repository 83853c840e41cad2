"""Greedy identity with and without speculation: the same prompts at temperature 0 through a server
without speculation (the reference) and one with it must give the same token ids, because vLLM's rejection
sampling accepts a draft token only where it is the target's own argmax.

What a difference means is judged from both runs' top log-probabilities (TOP_LOGPROBS of them) at the
first position where the two disagree. The verify step runs k + 1 tokens through the target where plain
decoding runs one, with other kernels and reduction orders, so where one run's chosen token is within
`tie_margin` of the other run's best (looked up in the reference's list, else the reference's token in the
speculative run's list) and the tokens both lists hold differ by no more than `tie_margin` between the runs,
rounding may pick either: a *near tie*, reported with its margin. Anything else is a *wrong token*:
speculation changed the text. Random weights make every distribution flat (the best tokens within hundredths
of a nat), so there the lists must be long to place the other run's token at all. The check also fails when
the speculative server drafted nothing (it would pass by not speculating).

The control: the reference engine against itself, the same prompts one at a time and then all at once. It
changes nothing but the batch shapes the kernels see, so a difference there is rounding that depends on the
shape, and a speculative difference of the same size can be that too; an identical control leaves the
speculative difference unexplained by shapes. The control informs; it does not change the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sparkserve.gate.common import Client
from sparkserve.gate.correctness import PROMPTS

DEFAULT_TIE_MARGIN = 0.05  # nats between the best token and the other run's choice
# vLLM's default --max-logprobs
TOP_LOGPROBS = 20


@dataclass(frozen=True)
class Sample:
    """One prompt's greedy continuation: token ids, and per position the top log-probabilities by token id."""

    prompt: str
    token_ids: tuple[int, ...]
    top: tuple[dict[int, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "token_ids": list(self.token_ids),
                "top": [{str(k): v for k, v in t.items()} for t in self.top]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Sample:
        return Sample(str(d["prompt"]), tuple(int(t) for t in d["token_ids"]),
                      tuple({int(k): float(v) for k, v in t.items()} for t in d.get("top") or []))


@dataclass(frozen=True)
class Difference:
    prompt: int
    position: int
    reference: int | None  # None: the reference ended there
    speculative: int | None
    margin: float | None  # one run's best minus the other run's token's log-probability
    near_tie: bool
    drift: float | None = None  # the largest change of a log-probability both runs list


@dataclass
class Verdict:
    ok: bool
    identical: int
    prompts: int
    differences: list[Difference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def detail(self) -> str:
        ties = [d for d in self.differences if d.near_tie]
        wrong = [d for d in self.differences if not d.near_tie]
        parts = [f"{self.identical}/{self.prompts} prompts token-identical"]
        if ties:
            parts.append("near ties at " + ", ".join(f"prompt {d.prompt} token {d.position} (margin "
                                                     f"{d.margin:.3g})" for d in ties))
        if wrong:
            parts.append("WRONG tokens at " + ", ".join(
                f"prompt {d.prompt} token {d.position} ({d.speculative} where the reference has {d.reference}"
                + (f", margin {d.margin:.3g})" if d.margin is not None else ")") for d in wrong))
        return "; ".join(parts + self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "identical": self.identical, "prompts": self.prompts, "detail": self.detail(),
                "differences": [d.__dict__ for d in self.differences], "problems": self.problems}


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(reference: Sequence[Sample], speculative: Sequence[Sample], drafts: float | None,
            tie_margin: float = DEFAULT_TIE_MARGIN, require_drafts: bool = True) -> Verdict:
    """Pure: the verdict on two runs of the same prompts; `drafts` is how many verify steps the
    speculative server made meanwhile (None: unknown, which fails unless `require_drafts` is off, as for
    the control, where neither run speculates)."""
    v = Verdict(ok=True, identical=0, prompts=len(reference))
    if [s.prompt for s in reference] != [s.prompt for s in speculative]:
        v.ok = False
        v.problems.append("the prompt sets differ")
        return v
    if not reference:
        v.ok = False
        v.problems.append("no prompts")
    if require_drafts and (drafts is None or drafts <= 0):
        v.ok = False
        v.problems.append("the speculative server drafted nothing ("
                          + ("its counters were not read" if drafts is None else "0 drafts")
                          + "): the comparison would not test speculation")
    for n, (r, s) in enumerate(zip(reference, speculative, strict=True)):
        at = _first_difference(r.token_ids, s.token_ids)
        if at is None:
            v.identical += 1
            continue
        ref_tok = r.token_ids[at] if at < len(r.token_ids) else None
        spec_tok = s.token_ids[at] if at < len(s.token_ids) else None
        ref_top = r.top[at] if at < len(r.top) else {}
        spec_top = s.top[at] if at < len(s.top) else {}
        margin = None
        if ref_top and spec_tok in ref_top:
            margin = max(ref_top.values()) - ref_top[spec_tok]
        elif ref_tok in spec_top and spec_tok in spec_top:  # a run's own choice must be in its list
            margin = spec_top[spec_tok] - spec_top[ref_tok]
        shared = set(ref_top) & set(spec_top)
        drift = max((abs(ref_top[t] - spec_top[t]) for t in shared), default=None)
        near = (margin is not None and math.isfinite(margin) and margin <= tie_margin
                and (drift is None or drift <= tie_margin))
        v.differences.append(Difference(n, at, ref_tok, spec_tok, margin, near, drift))
        if not near:
            v.ok = False
    return v


def _token_id(text: str) -> int:
    """vLLM's `return_tokens_as_token_ids` spells a token `token_id:<id>`."""
    return int(str(text).split(":", 1)[1])


def greedy(client: Client, model: str, max_tokens: int, prompts: Sequence[str] = PROMPTS,
           at_once: bool = False) -> list[Sample]:
    """Temperature-0 continuations of fixed length (EOS ignored), with the top log-probabilities; one
    prompt at a time, or all of them at once (`at_once`: the engine batches them)."""
    def one(prompt: str) -> Sample:
        r = client.completion(model, prompt, max_tokens=max_tokens, temperature=0, logprobs=TOP_LOGPROBS,
                              seed=0, return_tokens_as_token_ids=True, ignore_eos=True)
        lp = r["choices"][0]["logprobs"]
        top = tuple({_token_id(k): float(v) for k, v in (t or {}).items()}
                    for t in lp.get("top_logprobs") or [])
        return Sample(prompt, tuple(_token_id(t) for t in lp["tokens"]), top)

    if not at_once:
        return [one(p) for p in prompts]
    with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
        return list(pool.map(one, prompts))


def control(one_at_a_time: Sequence[Sample], all_at_once: Sequence[Sample],
            tie_margin: float = DEFAULT_TIE_MARGIN) -> Verdict:
    """The reference engine against itself (module docstring): no drafts are expected."""
    return compare(one_at_a_time, all_at_once, None, tie_margin, require_drafts=False)
