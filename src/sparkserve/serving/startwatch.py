"""The start summary: what a start spent its time on, read from the engine's log lines as they pass.

The entrypoint feeds every line of vLLM's output to a StartWatch with the time it arrived; when the API
server reports "Application startup complete" the watch yields the summary: time to ready, weight
loading, torch.compile (and whether vLLM loaded the compiled model from its cache), FlashInfer autotune,
CUDA-graph capture. The patterns are vLLM 0.33.0's messages (gpu_model_runner / model_runner,
compilation/backends, monitor, decorators; FlashInfer's autotuner).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

READY = re.compile(r"Application startup complete")
WEIGHTS = re.compile(r"Model loading took [0-9.]+ GiB memory and ([0-9.]+) seconds")
COMPILE_TOTAL = re.compile(r"torch\.compile took ([0-9.]+) s in total")
COMPILE_HIT = re.compile(r"Directly load (?:AOT compilation|the compiled graph)")
COMPILE_SAVED = re.compile(r"saved AOT compiled function|Compiling a graph for")
GRAPHS = re.compile(r"Graph capturing finished in ([0-9.]+) secs")
AUTOTUNE_START = re.compile(r"\[Autotuner\]: Autotuning process starts")
AUTOTUNE_END = re.compile(r"\[Autotuner\]: Autotuning process ends")


@dataclass
class StartWatch:
    t0: float
    weights_s: float | None = None
    compile_s: float = 0.0
    compile_seen: bool = False
    compile_from_cache: bool = False
    compiled: bool = False
    graphs_s: list[float] = field(default_factory=list)
    autotune_s: float = 0.0
    _autotune_since: float | None = None
    ready_s: float | None = None

    def feed(self, line: str, now: float) -> list[str]:
        """Take one output line (arrived at `now`); returns the summary once, at ready."""
        if self.ready_s is not None:
            return []
        if m := WEIGHTS.search(line):
            self.weights_s = (self.weights_s or 0.0) + float(m.group(1))
        elif m := COMPILE_TOTAL.search(line):
            self.compile_s += float(m.group(1))
            self.compile_seen = True
        elif COMPILE_HIT.search(line):
            self.compile_from_cache = True
        elif COMPILE_SAVED.search(line):
            self.compiled = True
        elif m := GRAPHS.search(line):
            self.graphs_s.append(float(m.group(1)))
        elif AUTOTUNE_START.search(line):
            self._autotune_since = now
        elif AUTOTUNE_END.search(line) and self._autotune_since is not None:
            self.autotune_s += now - self._autotune_since
            self._autotune_since = None
        elif READY.search(line):
            self.ready_s = now - self.t0
            return self.summary()
        return []

    def summary(self) -> list[str]:
        ready = f"{self.ready_s:.1f} s" if self.ready_s is not None else "not yet"
        if not self.compile_seen:
            comp = "not run (eager, or no compile line seen)"
        elif self.compile_from_cache and not self.compiled:
            comp = f"{self.compile_s:.2f} s, loaded from the compile cache"
        else:
            comp = f"{self.compile_s:.1f} s, compiled (stored in the compile cache for the next start)"
        graphs = (" + ".join(f"{g:g}" for g in self.graphs_s) + " s") if self.graphs_s else "none captured"
        weights = f"{self.weights_s:.1f} s" if self.weights_s is not None else "no loading line seen"
        return [
            f"sparkserve: start summary: ready in {ready}",
            f"  weights: {weights}",
            f"  torch.compile: {comp}",
            f"  FlashInfer autotune: {self.autotune_s:.1f} s",
            f"  CUDA graphs: {graphs}",
        ]
