"""End-to-end A/B of one profile variable: the shipped profile (A) against the profile with overrides
(B), each served by the entrypoint's own command, interleaved ABAB... in one sitting, one engine start
per arm and round: level 1, then `runs` timed pp2048/tg128 requests (llama-benchy, level 4 with level
1.5), so every start is also a level-6 run of its configuration.

Per arm: the median, quartiles and range of the per-request throughputs over all its starts; the
verdict compares the medians against the spread, and counts the rounds in which B beat A. Every engine
start is a validated benchmark run of the store; the comparison is a record of kind "ab" naming them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.harness import metadata
from sparkserve.harness.bench import presets
from sparkserve.harness.bench.results import rows
from sparkserve.harness.levels import benchmark, smoke
from sparkserve.harness.levels.common import Client
from sparkserve.harness.levels.matrix import MatrixEntry, common_settings, server_for
from sparkserve.harness.levels.server import Server
from sparkserve.harness.runstore import KIND_AB, METADATA, Run, Store, slug, write_json
from sparkserve.harness.speculative import metrics as spec_metrics
from sparkserve.harness.validate import profile_rules
from sparkserve.harness.validate.runs import profile_record
from sparkserve.progress import say
from sparkserve.serving import flags, profiles
from sparkserve.serving.profile import parse

METRICS = {"decode": "tg_tps", "prefill": "pp_tps"}


@dataclass(frozen=True)
class Arm:
    label: str  # "A" or "B"
    entry: MatrixEntry


def plan(profile: str, overrides: dict[str, str], settings: dict[str, Any], root: Path,
         rules_file: Path) -> tuple[Arm, Arm]:
    """The two arms, resolved and covered by the kernel rules; refused when they would run the same."""
    if not overrides:
        raise SparkserveError("an A/B needs at least one --set VAR=VALUE for arm B")
    common = common_settings(settings)
    a = profiles.resolve(profile, root, common, {})
    b = profiles.resolve(profile, root, common, overrides)
    rules = profile_rules.load(rules_file)
    for arm, res in (("A", a), ("B", b)):
        missing = profile_rules.uncovered(res.profile, rules)
        if missing:
            raise SparkserveError(f"arm {arm} ({res.label}): no kernel rule checks {', '.join(missing)}")
    same_cmd = flags.vllm_argv(a.profile) == flags.vllm_argv(b.profile)
    if a.profile == b.profile and same_cmd:
        raise SparkserveError(f"{b.label} resolves to the same server as {a.label}: the arms are identical")
    return Arm("A", MatrixEntry(a.label, a)), Arm("B", MatrixEntry(b.label, b))


def schedule(rounds: int) -> list[str]:
    if rounds < 1:
        raise SparkserveError("--rounds must be at least 1")
    return ["A", "B"] * rounds


def spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values),
            "max": max(values), "n": float(len(values))}


def compare(a: list[list[float]], b: list[list[float]]) -> dict[str, Any]:
    """Per-round value lists of each arm -> medians, spread, the change of B against A and the verdict.

    B differs from A when the medians differ by more than the wider of the two interquartile ranges
    (relative to A's median, and at least 0.5%); the rounds B won tell whether it held in each one."""
    fa, fb = [v for r in a for v in r], [v for r in b for v in r]
    if not fa or not fb:
        raise SparkserveError("an arm has no measured value")
    sa, sb = spread(fa), spread(fb)
    change = sb["median"] / sa["median"] - 1
    noise = max(sa["q3"] - sa["q1"], sb["q3"] - sb["q1"]) / sa["median"]
    threshold = max(noise, 0.005)
    # A round counts when both arms measured in it (llama-benchy reports no prefill for a request
    # whose prompt came from the prefix cache).
    paired = [(ra, rb) for ra, rb in zip(a, b, strict=False) if ra and rb]
    won = sum(statistics.median(rb) > statistics.median(ra) for ra, rb in paired)
    if abs(change) <= threshold:
        verdict = f"no difference beyond the spread ({change:+.1%}, spread {threshold:.1%})"
    else:
        verdict = f"B {'faster' if change > 0 else 'slower'} by {abs(change):.1%} (spread {threshold:.1%})"
    return {"A": sa, "B": sb, "change": change, "threshold": threshold, "rounds_b_won": won,
            "rounds": len(paired), "verdict": verdict, "b_better": change > threshold}


def run(profile: str, overrides: dict[str, str], settings: dict[str, Any], root: Path, store: Store,
        rules_file: Path, rounds: int, runs: int, work: Path, concurrent: bool = False
        ) -> tuple[Run, dict[str, Any]]:
    """Measure the A/B and record it; raises before any server starts when the arms are not valid.

    restart (default): one engine at a time, a fresh start per arm and round (what fits a Spark).
    concurrent: both engines up at once (B on the next port), started once, requests alternating
    between them round by round; needs memory for two engines (GPU_MEMORY_UTILIZATION in the settings)."""
    arm_a, arm_b = plan(profile, overrides, settings, root, rules_file)
    if concurrent:
        port = int(arm_b.entry.resolved.env["SPARKSERVE_PORT"]) + 1
        env = {**arm_b.entry.resolved.env, "SPARKSERVE_PORT": str(port)}
        moved = profiles.Resolved(arm_b.entry.resolved.name, env, parse(env), arm_b.entry.resolved.overrides)
        arm_b = Arm("B", MatrixEntry(arm_b.entry.name, moved))
    order = schedule(rounds)
    srv = settings.get("server") or {}
    preset = presets.get("ab").with_overrides(runs=runs)
    random_weights = settings.get("random_weights") is True
    hw = settings.get("hardware") or metadata.hardware_label(metadata.gpus())
    per_arm: dict[str, list[Run]] = {"A": [], "B": []}
    values: dict[str, dict[str, list[list[float]]]] = {m: {"A": [], "B": []} for m in METRICS}
    invalid: list[str] = []
    # Speculation's own counters per arm and round (a fresh engine per round in restart mode): the
    # acceptance length behind B's speed, measured on the same requests.
    accepted: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    servers: dict[str, Server] = {}
    commands: dict[str, list[str]] = {}
    t0 = time.monotonic()

    def up(arm: Arm) -> Server:
        if arm.label not in servers:
            servers[arm.label] = server_for(arm.entry, srv, work)
            commands[arm.label] = servers[arm.label].command
            servers[arm.label].start(float(srv.get("ready_timeout_s", 1800)))
        return servers[arm.label]

    def down(label: str) -> None:
        s = servers.pop(label, None)
        if s is not None:
            s.stop()

    try:
        if concurrent:
            for arm in (arm_a, arm_b):
                up(arm)  # one after the other: each sizes itself from the memory the other left
        for i, label in enumerate(order):
            arm = arm_a if label == "A" else arm_b
            say(f"==> A/B {i + 1}/{len(order)}: arm {label} ({arm.entry.name})")
            server = up(arm)
            l1 = smoke.run(Client(server.base_url), random_weights=random_weights)
            l1_file = work / f"ab-{i + 1}-{label}-level1.json"
            l1.write(l1_file)
            r, res = benchmark.run(benchmark.BenchSpec(
                base_url=server.base_url, tokenizer=Path(str(settings["tokenizer"])), preset=preset,
                configuration=arm.entry.name, store=store.root, root=root, hardware=hw,
                engine_log=server.log, server_pid=server.pid, serve_python=str(srv.get("python", "python3")),
                kernel_rules=rules_file, token_relay=random_weights, random_weights=random_weights,
                attach=(l1_file,),
                profile=profile_record(arm.entry.resolved.name, arm.entry.resolved.env,
                                       arm.entry.resolved.overrides),
            ))
            if arm.entry.resolved.profile.speculative != "off":
                accepted[label].append(_speculation(server.base_url))
            if not concurrent:
                down(label)
            per_arm[label].append(r)
            if not res.ok or not l1.ok or r.status() != "valid":
                invalid.append(f"{r.run_id} ({r.status()}, level 1 {'PASS' if l1.ok else 'FAIL'}, "
                               f"level 4 {'PASS' if res.ok else 'FAIL'})")
            for metric, key in METRICS.items():
                vals = [v for row in rows(r.bench() or {}) for v in _values(r, row.key, key)]
                values[metric][label].append(vals)
    finally:
        for label in list(servers):
            down(label)
    results = {m: compare(v["A"], v["B"]) for m, v in values.items()}
    record = _write(store, hw, profile, overrides, arm_a, arm_b, order, runs, per_arm, results, invalid,
                    time.monotonic() - t0, "concurrent" if concurrent else "restart", commands, accepted)
    return record, results


def _speculation(base_url: str) -> dict[str, Any]:
    """The engine's speculation counters since it started (concurrent mode: cumulative over rounds)."""
    try:
        return dict(spec_metrics.read(base_url).to_dict())
    except SparkserveError as exc:
        return {"error": str(exc)}


def _values(r: Run, key: tuple[int, int, int, int], metric: str) -> list[float]:
    """Per-request values of one llama-benchy test (its JSON keeps them under `values`)."""
    name = {"tg_tps": "tg_throughput", "pp_tps": "pp_throughput"}[metric]
    for b in (r.bench() or {}).get("benchmarks") or []:
        if b.get("is_context_prefill_phase"):
            continue
        test = (int(b["context_size"]), int(b["prompt_size"]), int(b["response_size"]), int(b["concurrency"]))
        if test == key:
            return [float(v) for v in (b.get(name) or {}).get("values") or []]
    return []


def _write(store: Store, hw: str, profile: str, overrides: dict[str, str], a: Arm, b: Arm, order: list[str],
           runs: int, per_arm: dict[str, list[Run]], results: dict[str, Any], invalid: list[str],
           wall_s: float, mode: str, commands: dict[str, list[str]],
           accepted: dict[str, list[dict[str, Any]]] | None = None) -> Run:
    """The A/B record; `commands` are the server command lines that ran (the harness's Python and
    host), not the image's."""
    label = b.entry.resolved.label
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = store.root / slug(hw) / f"{stamp}-ab-{slug(label)}"
    path.mkdir(parents=True, exist_ok=False)
    record = Run(path)
    first = (per_arm["A"] or per_arm["B"])[0].metadata()
    write_json(record.file(METADATA), {
        "schema": 1, "kind": KIND_AB, "name": f"{a.entry.name} vs {label}",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "hardware": hw,
        "profile": profile, "overrides": overrides, "order": "".join(order), "mode": mode,
        "runs_per_round": runs,
        "arms": {arm.label: {"configuration": arm.entry.name,
                             "command": commands[arm.label],
                             "runs": [r.run_id for r in per_arm[arm.label]],
                             **({"speculation": accepted[arm.label]} if accepted and accepted[arm.label]
                                else {})}
                 for arm in (a, b)},
        "results": results, "valid": not invalid, "invalid_runs": invalid, "wall_s": round(wall_s, 1),
        "repo": first.get("repo"), "site": first.get("site"), "gpu": first.get("gpu"),
        "random_weights": first.get("random_weights", False),
    })
    return record


def current_validity(record: Run, store: Store) -> tuple[bool, list[str]]:
    """Whether every run of the A/B passes level 1.5 and level 1 now (a run can be revalidated after
    the A/B was recorded, e.g. when a kernel rule was wrong), with the runs that do not."""
    bad = []
    meta = record.metadata()
    for arm in (meta.get("arms") or {}).values():
        for run_id in arm.get("runs", []):
            try:
                r = store.get(f"{record.hardware}/{run_id}")
            except SparkserveError:
                bad.append(f"{run_id} (missing)")
                continue
            level1 = (r.levels().get("1") or {}).get("ok")
            if r.status() != "valid" or level1 is not True:
                bad.append(f"{run_id} ({r.status()}, level 1 {'PASS' if level1 else 'FAIL'})")
    return not bad, bad


def summary(results: dict[str, Any]) -> list[str]:
    out = []
    for metric, r in results.items():
        a, b = r["A"], r["B"]
        out.append(f"{metric:8s} A {a['median']:10,.1f} [{a['q1']:,.1f}-{a['q3']:,.1f}]  "
                   f"B {b['median']:10,.1f} [{b['q1']:,.1f}-{b['q3']:,.1f}] tok/s  "
                   f"B won {r['rounds_b_won']}/{r['rounds']} rounds: {r['verdict']}")
    return out
