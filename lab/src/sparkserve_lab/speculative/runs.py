"""The GPU runs of speculative decoding (docs/GPU.md, lab/scripts/gpu/speculative.sh): each configuration is
served by the entrypoint itself (sparkserve_lab/server.py; one engine at a time, as `sparkserve ab` does),
measured, and stopped; the results are records of the run store.

identity: the profile without speculation, then with it; greedy token ids of the same prompts compared
          (identity.compare), with the speculative engine's draft counters proving it speculated.
cost:     decode tok/s at batch 1 and the engine's acceptance length without speculation, and per k at
          zero acceptance (the draft as configured: a random draft is rejected) and at full acceptance
          (SPECULATIVE_SYNTHETIC_ACCEPTANCE=k+1, measurement only); cost.py turns them into the table.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.gate.common import Client
from sparkserve.progress import say
from sparkserve.serving import draft, profiles
from sparkserve_lab import gzfile, metadata
from sparkserve_lab.levels.matrix import Matrix, MatrixEntry, common_settings, server_for
from sparkserve_lab.runstore import METADATA, Store, write_json
from sparkserve_lab.server import serving
from sparkserve_lab.speculative import cost, identity, metrics
from sparkserve_lab.validate import kernels, profile_rules

KIND_IDENTITY = "speculative-identity"
KIND_COST = "speculative-cost"
PROMPT = "The history of the printing press begins"


def _resolve(profile: str, root: Path, settings: Matrix,
             overrides: dict[str, str]) -> profiles.Resolved:
    res = profiles.resolve(profile, root, common_settings(settings), overrides)
    if res.profile.speculative != "off":
        # what the entrypoint checks before vLLM: the draft is there and fits the target
        say(f"  speculative: {draft.check(res.profile, {**os.environ, **res.env})}")
    return res


def without_speculation(overrides: dict[str, str]) -> dict[str, str]:
    """The overrides of the reference arm: the same, with speculation off and none of its variables."""
    return {k: v for k, v in overrides.items() if not k.startswith("SPECULATIVE")} | {"SPECULATIVE": "off"}


def arm_overrides(overrides: dict[str, str], mode: str, extra: dict[str, str]) -> dict[str, str]:
    """The overrides one cost configuration serves: without speculation for `off`, else with its k/mode."""
    return without_speculation(overrides) if mode == "off" else {**overrides, **extra}


def fail_invalid_arms(verdict: identity.Verdict, checked: dict[str, dict[str, Any]]) -> None:
    """An identity verdict fails when level 1.5 found an arm's engine not the one its profile names."""
    for arm, v in checked.items():
        if not v["valid"]:
            verdict.ok = False
            verdict.problems.append(f"level 1.5 of the {arm} engine: {v['failures']}")


def invalid_starts(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The cost configurations whose engine start level 1.5 found invalid (then no table is drawn)."""
    return [f"k={r['k']} {r['mode']}: {r['level_1_5']['failures']}" for r in runs
            if not r["level_1_5"]["valid"]]


# vLLM's first words when it is stopped (the harness stops each engine after measuring it, then reads
# its log): what follows is the stop's own teardown, whose aborted requests vLLM logs as errors.
_STOPPED = re.compile(r"\[shutdown\] (API server: shutdown triggered|EngineCore: trigger received signal)")


def served_part(log_text: str) -> str:
    """The log up to the engine's stop: what it wrote while it served."""
    m = _STOPPED.search(log_text)
    return log_text if m is None else log_text[:log_text.rfind("\n", 0, m.start()) + 1]


def served_profile(profile: str, root: Path) -> dict[str, str]:
    """The profile file's variables as this run served them: a recheck after the profile's defaults
    changed judges the run by what it ran, not by today's file."""
    return profiles.read_env_file(profiles.profile_path(profile, root))


def level15(res: profiles.Resolved, log: Path, root: Path) -> dict[str, Any]:
    """Level 1.5 of one engine start: the log it wrote while serving (served_part) against the rules its
    profile implies (speculation's too)."""
    table = profile_rules.load(root / "lab" / "configs" / "engine-kernels.toml")
    rules = profile_rules.rules_for(res.profile, table, res.label, res.env)
    try:
        v = kernels.check(rules, served_part(log.read_text(errors="replace")))
    except OSError as exc:
        return {"valid": False, "failures": [f"no engine log: {exc}"]}
    return {"valid": v.valid, "failures": [c.to_dict() for c in v.failures()]}


def _record_dir(store: Path, hardware: str, kind: str, label: str) -> Path:
    return Store(store).new_record(hardware, f"{kind}-{label}").path


def _serve(res: profiles.Resolved, name: str, settings: Matrix, work: Path, root: Path,
           measure: Callable[[Client], Any]) -> tuple[Any, list[str], Path]:
    server = server_for(MatrixEntry(name, res), settings.server, work, root)
    with serving(server, settings.server.ready_timeout_s):
        return measure(Client(server.base_url)), server.vllm_command, server.log


# The control's second sampling of the reference engine (identity.control).
CONTROL_SAMPLES = "samples-reference-at-once.json"
CONTROL_WHAT = "the reference engine against itself: the prompts one at a time, then all at once"


def identity_run(profile: str, overrides: dict[str, str], settings: Matrix, root: Path, store: Path,
                 work: Path, max_tokens: int, tie_margin: float) -> tuple[Path, identity.Verdict]:
    ref = _resolve(profile, root, settings, without_speculation(overrides))
    spec = _resolve(profile, root, settings, overrides)
    if spec.profile.speculative == "off":
        raise SparkserveError("the speculative arm has SPECULATIVE=off: give --set SPECULATIVE=eagle3 "
                              "(or ngram)")
    if spec.profile.speculative_synthetic_acceptance is not None:
        raise SparkserveError("synthetic acceptance changes the text by design: the identity check runs "
                              "without SPECULATIVE_SYNTHETIC_ACCEPTANCE")

    def sample(client: Client) -> tuple[list[identity.Sample], metrics.Counters]:
        model = client.model_id()
        before = metrics.read(client.root)
        got = identity.greedy(client, model, max_tokens)
        return got, metrics.read(client.root) - before

    def sample_twice(client: Client) -> tuple[list[identity.Sample], list[identity.Sample]]:
        return sample(client)[0], identity.greedy(client, client.model_id(), max_tokens, at_once=True)

    (a, a_batched), cmd_a, log_a = _serve(ref, "reference", settings, work, root, sample_twice)
    (b, counted), cmd_b, log_b = _serve(spec, "speculative", settings, work, root, sample)
    verdict = identity.compare(a, b, counted.drafts, tie_margin)
    controlled = identity.control(a, a_batched, tie_margin)
    say(f"control ({CONTROL_WHAT}): {controlled.detail()}")
    checked = {"reference": level15(ref, log_a, root), "speculative": level15(spec, log_b, root)}
    fail_invalid_arms(verdict, checked)
    hw = settings.hardware or metadata.hardware_label(metadata.gpus())
    path = _record_dir(store, hw, KIND_IDENTITY, spec.label)
    write_json(path / "samples-reference.json", [s.to_dict() for s in a])
    write_json(path / "samples-speculative.json", [s.to_dict() for s in b])
    write_json(path / CONTROL_SAMPLES, [s.to_dict() for s in a_batched])
    for name, log in (("engine-reference.log", log_a), ("engine-speculative.log", log_b)):
        if log.is_file():
            (path / name).write_bytes(log.read_bytes())
    gzfile.compact(path)
    write_json(path / METADATA, {
        "schema": 1, "kind": KIND_IDENTITY, "name": f"{profile} vs {spec.label}", "hardware": hw,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "profile": profile,
        "profile_env": served_profile(profile, root),
        "overrides": overrides, "max_tokens": max_tokens, "tie_margin": tie_margin,
        "random_weights": settings.random_weights, "commands": {"reference": cmd_a,
                                                                              "speculative": cmd_b},
        "counters": counted.to_dict(), "verdict": verdict.to_dict(), "level_1_5": checked,
        "control": {"what": CONTROL_WHAT, **controlled.to_dict()},
        "repo": metadata.repo_info(root),
        "gpu": metadata.gpus(),
    })
    return path, verdict


def identity_urls(reference_url: str, speculative_url: str, max_tokens: int,
                  tie_margin: float) -> identity.Verdict:
    """The same check against two servers already running (the operator started both)."""
    ref, spec = Client(reference_url), Client(speculative_url)
    a = identity.greedy(ref, ref.model_id(), max_tokens)
    before = metrics.read(spec.root)
    b = identity.greedy(spec, spec.model_id(), max_tokens)
    return identity.compare(a, b, (metrics.read(spec.root) - before).drafts, tie_margin)


def decode_rate(client: Client, model: str, tokens: int, repeats: int) -> float:
    """Decode tok/s at batch 1: a `tokens`-long and a 1-token completion of the same prompt, EOS ignored;
    their time difference is tokens - 1 decode steps' worth of tokens (prefill cancels). Median of repeats."""
    def timed(n: int) -> float:
        t0 = time.perf_counter()
        r = client.completion(model, PROMPT, max_tokens=n, temperature=0, ignore_eos=True, seed=0)
        dt = time.perf_counter() - t0
        got = int((r.get("usage") or {}).get("completion_tokens") or 0)
        if got != n:
            raise SparkserveError(f"asked for {n} tokens, got {got}")
        return dt

    timed(tokens)  # warm-up (first request of a graph size)
    rates = []
    for _ in range(repeats):
        long, short = timed(tokens), timed(1)
        if long <= short:
            raise SparkserveError(f"a {tokens}-token completion took {long:.3f} s, a 1-token one "
                                  f"{short:.3f} s")
        rates.append((tokens - 1) / (long - short))
    return statistics.median(rates)


def configurations(ks: Sequence[int], modes: Sequence[str]) -> list[tuple[int, str, dict[str, str]]]:
    """(k, mode, overrides) in the order they are served: off first, then per k zero then full."""
    out: list[tuple[int, str, dict[str, str]]] = [(0, "off", {"SPECULATIVE": "off"})]
    for k in ks:
        if "zero" in modes:
            out.append((k, "zero", {"SPECULATIVE_TOKENS": str(k)}))
        if "full" in modes:
            out.append((k, "full", {"SPECULATIVE_TOKENS": str(k),
                                    "SPECULATIVE_SYNTHETIC_ACCEPTANCE": str(k + 1)}))
    return out


def cost_run(profile: str, overrides: dict[str, str], settings: Matrix, root: Path, store: Path,
             work: Path, ks: Sequence[int], modes: Sequence[str], tokens: int,
             repeats: int) -> tuple[Path, list[cost.Point], list[str]]:
    """Measure every configuration; the record, its points, and the engine starts level 1.5 found invalid
    (then no table is drawn: a point whose kernels are not its profile's measures something else)."""
    if not settings.random_weights:
        raise SparkserveError("the cost run serves random weights (a matrix with random_weights: true): its "
                              "full-acceptance arm is measurement only")
    hw = settings.hardware or metadata.hardware_label(metadata.gpus())
    label = f"{profile}-{overrides.get('SPECULATIVE', 'eagle3')}"
    path = _record_dir(store, hw, KIND_COST, label)
    points: list[cost.Point] = []
    runs: list[dict[str, Any]] = []
    for k, mode, extra in configurations(ks, modes):
        res = _resolve(profile, root, settings, arm_overrides(overrides, mode, extra))
        say(f"==> cost: k={k} {mode}")

        def measure(client: Client) -> tuple[float, metrics.Counters]:
            model = client.model_id()
            before = metrics.read(client.root)
            rate = decode_rate(client, model, tokens, repeats)
            return rate, metrics.read(client.root) - before

        (rate, counted), cmd, log = _serve(res, f"cost-k{k}-{mode}", settings, work, root, measure)
        tau = 1.0 if mode == "off" else counted.acceptance_length
        if tau is None:
            raise SparkserveError(f"k={k} {mode}: the engine drafted nothing; speculation did not run")
        points.append(cost.Point(k, mode, rate, tau))
        runs.append({"k": k, "mode": mode, "tok_s": rate, "acceptance_length": tau,
                     "counters": counted.to_dict(), "command": cmd, "log": log.name,
                     "level_1_5": level15(res, log, root)})
        write_json(path / "points.json", runs)  # as it goes: a stopped run keeps what it measured
        if log.is_file():
            (path / f"engine-k{k}-{mode}.log").write_bytes(log.read_bytes())
    invalid = invalid_starts(runs)
    table = [] if invalid else cost.costs(points)
    (path / "cost.md").write_text("not drawn, level 1.5 invalid: " + "; ".join(invalid) + "\n" if invalid
                                  else cost.markdown(table, hw))
    write_json(path / METADATA, {
        "schema": 1, "kind": KIND_COST, "name": label, "hardware": hw, "profile": profile,
        "profile_env": served_profile(profile, root),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "overrides": overrides,
        "tokens": tokens, "repeats": repeats, "ks": list(ks), "modes": list(modes), "points": runs,
        "break_even": {c.k: c.break_even() for c in table}, "estimates": cost.estimates(table),
        "valid": not invalid, "invalid": invalid, "repo": metadata.repo_info(root), "gpu": metadata.gpus(),
        "measurement_only": "full acceptance is vLLM's synthetic rejection sampling: the text is not the "
                            "model's",
    })
    return path, points, invalid
