"""Map upstream source (sdist) paths to where the installed wheel keeps them.

vLLM's Python package installs 1:1. FlashInfer's wheel ships its C++/CUDA sources for JIT under
flashinfer/data/. Paths that no wheel ships (tests, docs) are skipped in installed environments;
paths that need a compiled rebuild (vLLM's csrc/) cannot be patched into a wheel: that is an error,
never a silent skip.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkserve.errors import SparkserveError


@dataclass(frozen=True)
class Rule:
    prefix: str
    site_prefix: str | None  # None: not shipped in the wheel, skipped there


RULES: dict[str, tuple[Rule, ...]] = {
    "vllm": (
        Rule("vllm/", "vllm/"),
        Rule("tests/", None),
        Rule("docs/", None),
        Rule("benchmarks/", None),
        Rule("examples/", None),
    ),
    "flashinfer": (
        Rule("flashinfer/", "flashinfer/"),
        Rule("include/", "flashinfer/data/include/"),
        Rule("csrc/", "flashinfer/data/csrc/"),
        Rule("3rdparty/cutlass/include/", "flashinfer/data/cutlass/include/"),
        Rule("3rdparty/cutlass/tools/util/include/", "flashinfer/data/cutlass/tools/util/include/"),
        Rule("3rdparty/cccl/", "flashinfer/data/cccl/"),
        Rule("tests/", None),
        Rule("docs/", None),
        Rule("benchmarks/", None),
    ),
}


def to_site(upstream: str, path: str) -> str | None:
    """The installed path of a source path, or None if wheels do not ship it."""
    for rule in RULES[upstream]:
        if path.startswith(rule.prefix):
            if rule.site_prefix is None:
                return None
            return rule.site_prefix + path[len(rule.prefix) :]
    raise SparkserveError(
        f"{upstream}: {path} has no place in an installed wheel (it needs a source build); "
        f"known prefixes: {', '.join(r.prefix for r in RULES[upstream])}"
    )
