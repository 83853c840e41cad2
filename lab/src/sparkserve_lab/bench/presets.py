"""Benchmark presets: the table shapes Spark owners compare."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Preset:
    name: str
    pp: tuple[int, ...]
    tg: tuple[int, ...]
    depth: tuple[int, ...]
    concurrency: tuple[int, ...]
    runs: int
    prefix_caching: bool
    description: str

    def with_overrides(
        self,
        pp: list[int] | None = None,
        tg: list[int] | None = None,
        depth: list[int] | None = None,
        concurrency: list[int] | None = None,
        runs: int | None = None,
    ) -> Preset:
        return replace(
            self,
            pp=tuple(pp) if pp else self.pp,
            tg=tuple(tg) if tg else self.tg,
            depth=tuple(depth) if depth else self.depth,
            concurrency=tuple(concurrency) if concurrency else self.concurrency,
            runs=runs if runs else self.runs,
        )

    def expected_requests(self) -> int:
        """Timed requests llama-benchy sends (each context-load phase adds one per request)."""
        n = 0
        for d in self.depth:
            per = len(self.pp) * len(self.tg) * sum(self.concurrency) * self.runs
            n += per * (2 if self.prefix_caching and d > 0 else 1)
        return n

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "pp": list(self.pp),
            "tg": list(self.tg),
            "depth": list(self.depth),
            "concurrency": list(self.concurrency),
            "runs": self.runs,
            "prefix_caching": self.prefix_caching,
        }


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("quick", (2048,), (32,), (0,), (1,), 3, False, "pp2048/tg32, 3 runs"),
        Preset("ab", (2048,), (128,), (0,), (1,), 5, False, "pp2048/tg128, 5 runs: one arm start of an A/B"),
        Preset(
            "spark-arena",
            (2048,),
            (128,),
            (0, 4096, 8192, 16384, 32768, 65535, 100000),
            (1, 2, 5, 10),
            3,
            True,
            "Spark Arena profile: depth 0..100000, pp2048, tg128, concurrency 1/2/5/10, prefix caching",
        ),
        Preset(
            "concurrency",
            (512,),
            (128,),
            (0,),
            (1, 2, 4, 5, 8, 10, 16, 32, 64),
            3,
            False,
            "the concurrency curve: pp512/tg128 at c=1..64 (5 and 10 between captured graph sizes), 3 runs",
        ),
        Preset(
            "load",
            (2048,),
            (128,),
            (0,),
            (1, 4, 8, 32, 64),
            3,
            False,
            "under load: pp2048/tg128 at c=1, 4, 8, 32, 64, 3 runs (decode, time to first token and "
            "end-to-end throughput per batch)",
        ),
        Preset(
            "decode-depth",
            (2048,),
            (32,),
            (0, 4096, 8192, 16384, 32768),
            (1,),
            3,
            False,
            "llama.cpp benches/dgx-spark.md shape: pp2048/tg32 at depth 0..32768",
        ),
    )
}


def get(name: str) -> Preset:
    from sparkserve.errors import SparkserveError

    if name not in PRESETS:
        raise SparkserveError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]
