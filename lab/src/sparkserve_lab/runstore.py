"""The run store: where every measured number lives. Two kinds of record share one layout and one
metadata schema (`metadata.json`, with `kind`):

    results/
      <hardware>/                      e.g. nvidia-gb10, nvidia-h100-80gb-hbm3, cpu-x86_64-2c
        baselines.json                 {configuration: run-id}: level 5 compares against these
        <run-id>/                      kind "bench": <UTC time>-<configuration>-<preset>-<hex>
          metadata.json                pins, patch manifest, image, pip freeze, GPU/host, vLLM flags/env
          llama-benchy.json            llama-benchy's own --format json result
          llama-benchy.log             its stdout/stderr
          llama-benchy-progress.jsonl.gz  its progress events (a timestamp per timed request's start,
                                       end; gzipped; plain .jsonl in records made before)
          batches.json                 each batch's end-to-end time, from those events (bench.batches)
          engine.log.gz                the serving engine's log (copied in, gzipped; plain engine.log in
                                       records made before)
          validation.json              level 1.5: kernels vs lab/configs/engine-kernels.toml
          levels.json                  outcomes of the levels run against this server (1, 3, 5 ...)
        <ab-id>/                       kind "ab": <UTC time>-ab-<profile>+<VAR=VALUE>-<hex>: arms, order,
                                       the runs of each engine start, medians, spread, verdict
        <proof-id>/                    kind "proof": <UTC time>-<name>-<hex>
          metadata.json                what it proves (patch ids), the command, the verdict, the commit,
                                       the patch manifest it ran with, the GPU
          *.json, *.log                its artifacts, listed in metadata.json; output.log and
                                       upstream-tests.json past gzfile.COMPACT_BYTES gzipped (.gz, read
                                       by the plain name: gzfile.existing), as a speculative record's
                                       samples-*.json and a profile's step-*.json: every GPU call
                                       carries the whole tracked tree
        <measurement-id>/              kind "measurement": a proof's layout for a command that times
                                       (verdict "measured" or "fail", never "pass": a timing asserts nothing)

A proof or measurement with `"imported": true` was written by hand after the sitting (no exit code):
reports show it apart from the computed ones.

A run is *valid* when validation.json says so, *invalid* when it says not, *unvalidated* when there is
no validation.json. Reports publish valid and unvalidated runs (labelled) and list invalid ones.
Whether a record was made with the current patch series is `sparkserve_lab.provenance`'s call.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve_lab import gzfile

METADATA = "metadata.json"
BENCH = "llama-benchy.json"
BENCH_LOG = "llama-benchy.log"
BATCHES = "batches.json"
ENGINE_LOG = "engine.log"
# Stored gzipped: an engine of a concurrent A/B serves every round, so each run's copy holds its whole
# log so far (about 0.6 MB a run plain, a tenth of that gzipped), and the store travels with the tree to
# every GPU call, whose size is capped.
ENGINE_LOG_GZ = ENGINE_LOG + ".gz"
VALIDATION = "validation.json"
LEVELS = "levels.json"
BASELINES = "baselines.json"
KIND_BENCH = "bench"
KIND_PROOF = "proof"
KIND_AB = "ab"
KIND_MEASUREMENT = "measurement"

_SLUG = re.compile(r"[^a-z0-9._-]+")


def slug(text: str) -> str:
    s = _SLUG.sub("-", text.lower()).strip("-")
    return s or "unknown"


def read_json(path: Path) -> Any:
    """A JSON file, or its gzipped twin where the record keeps it compacted (gzfile.compact())."""
    try:
        return json.loads(gzfile.read_text(gzfile.existing(path)))
    except (OSError, ValueError) as exc:
        raise SparkserveError(f"unreadable {path}: {exc}") from exc


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class Run:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def hardware(self) -> str:
        return self.path.parent.name

    def file(self, name: str) -> Path:
        return self.path / name

    def engine_log(self) -> Path | None:
        """The run's engine log: gzipped, or plain in a record made before logs were stored gzipped."""
        for name in (ENGINE_LOG_GZ, ENGINE_LOG):
            if (p := self.file(name)).exists():
                return p
        return None

    def store_engine_log(self, log: Path) -> Path:
        """Copy an engine's log into the run, gzipped (no name or time in the header: the same log gives the
        same bytes)."""
        return gzfile.write_gzipped(log, self.file(ENGINE_LOG_GZ))

    def metadata(self) -> dict[str, Any]:
        p = self.file(METADATA)
        return dict(read_json(p)) if p.exists() else {}

    def bench(self) -> dict[str, Any] | None:
        p = self.file(BENCH)
        return dict(read_json(p)) if p.exists() else None

    def batches(self) -> dict[str, Any] | None:
        """batches.json: each batch's end-to-end time (runs measured before it existed have none)."""
        p = self.file(BATCHES)
        return dict(read_json(p)) if p.exists() else None

    def validation(self) -> dict[str, Any] | None:
        p = self.file(VALIDATION)
        return dict(read_json(p)) if p.exists() else None

    def status(self) -> str:
        """'valid', 'invalid' or 'unvalidated'."""
        v = self.validation()
        if v is None:
            return "unvalidated"
        return "valid" if v.get("valid") else "invalid"

    @property
    def kind(self) -> str:
        """Records written before proofs joined the store have no `kind`: they are benchmark runs."""
        return str(self.metadata().get("kind", KIND_BENCH))

    @property
    def configuration(self) -> str:
        return str(self.metadata().get("configuration", "unknown"))

    def levels(self) -> dict[str, Any]:
        p = self.file(LEVELS)
        return dict(read_json(p)) if p.exists() else {}

    def record_level(self, level: str, outcome: dict[str, Any]) -> None:
        data = self.levels()
        data[level] = outcome
        write_json(self.file(LEVELS), data)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root

    def new_run(self, hardware: str, configuration: str, label: str) -> Run:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run_id = f"{stamp}-{slug(configuration)}-{slug(label)}-{secrets.token_hex(2)}"
        path = self.root / slug(hardware) / run_id
        path.mkdir(parents=True, exist_ok=False)
        return Run(path)

    def hardware(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def new_record(self, hardware: str, name: str) -> Run:
        """A record folder named by its time and NAME, with a random suffix: two records of one
        name made in the same second (two GPUs of one host) get folders of their own."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = self.root / slug(hardware) / f"{stamp}-{slug(name)}-{secrets.token_hex(2)}"
        path.mkdir(parents=True, exist_ok=False)
        return Run(path)

    def records(self, hardware: str | None = None) -> list[Run]:
        """Every record, benchmark runs and proofs, oldest first per hardware."""
        out: list[Run] = []
        for hw in [hardware] if hardware else self.hardware():
            d = self.root / hw
            if d.is_dir():
                out.extend(Run(p) for p in sorted(d.iterdir()) if p.is_dir() and (p / METADATA).exists())
        return out

    def runs(self, hardware: str | None = None) -> list[Run]:
        """Benchmark runs (level 4)."""
        return [r for r in self.records(hardware) if r.kind == KIND_BENCH]

    def proofs(self, hardware: str | None = None) -> list[Run]:
        return [r for r in self.records(hardware) if r.kind == KIND_PROOF]

    def measurements(self, hardware: str | None = None) -> list[Run]:
        """Records of `proof run --measurement`: timings, with the patches they ran with."""
        return [r for r in self.records(hardware) if r.kind == KIND_MEASUREMENT]

    def abs(self, hardware: str | None = None) -> list[Run]:
        """A/B comparisons (`sparkserve ab`): each names the benchmark runs of its arms."""
        return [r for r in self.records(hardware) if r.kind == KIND_AB]

    def get(self, ref: str) -> Run:
        """A run by path, by '<hardware>/<run-id>', or by a unique run-id (prefix)."""
        p = Path(ref)
        if (p / METADATA).exists():
            return Run(p.resolve())
        if (self.root / ref / METADATA).exists():
            return Run(self.root / ref)
        hits = [r for r in self.records() if r.run_id.startswith(ref)]
        if len(hits) != 1:
            raise SparkserveError(
                f"run {ref!r}: {'no' if not hits else 'more than one'} match in {self.root}"
            )
        return hits[0]

    def latest(self, hardware: str, configuration: str | None = None) -> Run | None:
        runs = [r for r in self.runs(hardware) if configuration is None or r.configuration == configuration]
        return runs[-1] if runs else None

    def baselines(self, hardware: str) -> dict[str, str]:
        p = self.root / hardware / BASELINES
        return {str(k): str(v) for k, v in read_json(p).items()} if p.exists() else {}

    def baseline(self, hardware: str, configuration: str) -> Run | None:
        run_id = self.baselines(hardware).get(configuration)
        if run_id is None:
            return None
        run = Run(self.root / hardware / run_id)
        if not run.file(METADATA).exists():
            raise SparkserveError(
                f"baseline {hardware}/{run_id} for {configuration} is missing from the store"
            )
        return run

    def set_baseline(self, run: Run) -> None:
        if run.status() == "invalid":
            raise SparkserveError(f"{run.run_id} is invalid (kernel validation failed): not a baseline")
        data = self.baselines(run.hardware)
        data[run.configuration] = run.run_id
        write_json(self.root / run.hardware / BASELINES, data)
