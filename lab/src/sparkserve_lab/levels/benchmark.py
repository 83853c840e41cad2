"""Level 4, benchmark: llama-benchy into a new run of the store, with metadata and (given the engine
log) the level 1.5 kernel validation that decides whether the run is valid."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.gate.common import LevelResult
from sparkserve.progress import say
from sparkserve_lab import metadata
from sparkserve_lab.bench import driver
from sparkserve_lab.bench.presets import Preset
from sparkserve_lab.runstore import METADATA, VALIDATION, Run, Store, write_json
from sparkserve_lab.validate import runs as run_validation
from sparkserve_lab.validate.kernels import RULES_FILE


@dataclass
class BenchSpec:
    base_url: str
    tokenizer: Path
    preset: Preset
    configuration: str
    store: Path
    root: Path
    hardware: str | None = None
    model: str | None = None
    engine_log: Path | None = None
    trace: Path | None = None
    kernel_rules: Path | None = None
    server_pid: int | None = None
    serve_python: str | None = None
    book: Path | None = None
    allow_errors: bool = False
    attach: tuple[Path, ...] = ()
    timeout_s: float | None = None
    token_relay: bool = False  # random-weight gpt-oss (bench.relay)
    random_weights: bool = False  # recorded in the metadata: numbers measure kernels, not a model
    profile: dict[str, Any] | None = None  # the serving profile the server runs (runs.profile_record)


def run(spec: BenchSpec) -> tuple[Run, LevelResult]:
    res = LevelResult("4", "benchmark")
    start = time.monotonic()
    hw = spec.hardware or metadata.hardware_label(metadata.gpus())
    store = Store(spec.store)
    r = store.new_run(hw, spec.configuration, spec.preset.name)
    say(f"run {r.hardware}/{r.run_id}")
    try:
        out = driver.run(
            driver.BenchRequest(
                base_url=spec.base_url,
                tokenizer=spec.tokenizer,
                preset=spec.preset,
                out_dir=r.path,
                model=spec.model,
                book_file=spec.book,
                timeout_s=spec.timeout_s,
                token_relay=spec.token_relay,
            )
        )
        res.add(
            "llama-benchy collected results",
            True,
            f"{len(out.rows)} test(s), {out.requests_done} requests in {out.wall_s:.0f}s",
        )
        missing = [r.label() for r in out.rows if not r.pp_tps or not r.tg_tps]
        res.add(
            "prefill and decode throughput measured",
            not missing,
            f"no prefill or decode number for {', '.join(missing)}" if missing else "every test has both",
        )
        res.add(
            "no failed benchmark requests",
            out.request_errors == 0 or (None if spec.allow_errors else False),
            f"{out.request_errors} failed",
        )
        bench_info = {
            "command": out.command,
            "book_sha256": out.book_sha256,
            "wall_s": round(out.wall_s, 1),
            "requests": out.requests_done,
            "request_errors": out.request_errors,
            "token_relay": out.relay,
        }
    except SparkserveError as exc:
        res.add("llama-benchy collected results", False, str(exc))
        bench_info = {"error": str(exc)}
    meta = metadata.collect(
        root=spec.root,
        configuration=spec.configuration,
        base_url=spec.base_url,
        server_pid=spec.server_pid,
        serve_python=spec.serve_python,
        hardware=hw,
        extra={
            "preset": spec.preset.to_dict(),
            "bench": bench_info,
            "tokenizer": str(spec.tokenizer),
            "random_weights": spec.random_weights,
            **({"profile": spec.profile} if spec.profile else {}),
        },
    )
    write_json(r.file(METADATA), meta)
    if spec.engine_log:
        stored_log = r.store_engine_log(spec.engine_log)
        rules_file = spec.kernel_rules or spec.root / RULES_FILE
        rules = run_validation.rules_for(meta, spec.configuration, rules_file)
        if rules is not None:
            v = run_validation.validate(r, rules, rules_file, stored_log, spec.trace)
            res.add("kernels match the configuration (level 1.5)", v.valid, f"see {VALIDATION}")
        else:
            res.add(
                "kernels match the configuration (level 1.5)",
                None,
                f"skipped: {spec.configuration!r} has no entry in {rules_file} (run stays unvalidated)",
            )
    else:
        res.add(
            "kernels match the configuration (level 1.5)",
            None,
            "skipped: no --engine-log (run stays unvalidated)",
        )
    for p in spec.attach:
        data = json.loads(p.read_text())
        r.record_level(str(data.get("level", p.stem)), data)
    res.wall_s = time.monotonic() - start
    res.metrics["run"] = f"{r.hardware}/{r.run_id}"
    r.record_level("4", res.to_dict())
    return r, res
