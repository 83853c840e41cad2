"""End-to-end A/B of profile variables: the shipped profile (arm A) against the profile with overrides
(arm B, and with more arms C, D... each its own overrides), each served by the entrypoint's own command,
in one sitting: per arm and round level 1, then `runs` timed requests of a level-4 preset (llama-benchy,
with level 1.5), so every engine start is also a level-6 run of its configuration.

Modes: restart (one engine at a time, a fresh start per arm and round: what fits a Spark); concurrent
(both engines up at once on one GPU, requests alternating); sleep (both engines started once on one GPU,
each with the memory the profile gives it, one awake at a time: vLLM's sleep mode keeps the other's
weights in host memory and frees its KV cache); GPUs (each arm on its own GPU, all up at once,
requests alternating arm by arm; the placements rotate so that each arm sits on each GPU for as many
rounds: a Latin square, which for two arms is the swap after half the rounds). Arms are never measured at
the same time: three arms measured side by side on one 4 x H200 host decoded 10-75% below one arm alone
(results/nvidia-h200-x4/20261128T174044Z-load-study-side-by-side-perturbed).

The round is the unit of the verdict: per round the median of each arm's values, B's change against A in
that round, and a sign test over the rounds (compare()). The median, quartiles and range of all values per
arm only describe the arms. Metrics: decode and prefill tok/s, the time to the first token (lower is
better) and end-to-end tok/s (a batch's generated tokens over its wall time, bench.batches). Every engine
start is a validated benchmark run of the store; each comparison of an arm with A is a record of kind "ab"
naming them (recompute() judges it again).
"""

from __future__ import annotations

import math
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.gate import smoke
from sparkserve.gate.common import Client
from sparkserve.progress import say
from sparkserve.serving import flags, profiles
from sparkserve.serving.profile import parse
from sparkserve_lab import metadata
from sparkserve_lab.bench import presets
from sparkserve_lab.bench.batches import e2e_values
from sparkserve_lab.bench.results import rows
from sparkserve_lab.levels import benchmark
from sparkserve_lab.levels.matrix import Matrix, MatrixEntry, common_settings, engine_env, server_for
from sparkserve_lab.runstore import KIND_AB, METADATA, Run, Store, write_json
from sparkserve_lab.server import Server
from sparkserve_lab.speculative import metrics as spec_metrics
from sparkserve_lab.validate import profile_rules
from sparkserve_lab.validate.runs import profile_record

# result name -> the value it judges (llama-benchy's per-request or per-batch values, or bench.batches')
METRICS = {"decode": "tg_tps", "prefill": "pp_tps", "ttft": "e2e_ttft", "e2e": "e2e_tps"}
LOWER_IS_BETTER = frozenset({"ttft"})
# llama-benchy's time to the first token is in milliseconds; the other metrics are rates
UNITS = {"decode": "tok/s", "prefill": "tok/s", "ttft": "ms", "e2e": "tok/s"}
# what records made before TTFT and end-to-end throughput joined were judged on (their `metrics` is unset)
LEGACY_METRICS = ("decode", "prefill")
LABELS = "ABCDEFGH"


@dataclass(frozen=True)
class Arm:
    label: str  # "A" or "B"
    entry: MatrixEntry


def plan(profile: str, overrides: dict[str, str], settings: Matrix, root: Path,
         rules_file: Path, more: tuple[dict[str, str], ...] = ()) -> tuple[Arm, ...]:
    """The arms, resolved and covered by the kernel rules: A (the profile), B (`overrides`) and one more
    per entry of `more`; refused when two of them would run the same server."""
    if not overrides:
        raise SparkserveError("an A/B needs at least one --set VAR=VALUE for arm B")
    if any(not m for m in more):
        raise SparkserveError("an --arm needs at least one VAR=VALUE")
    if 2 + len(more) > len(LABELS):
        raise SparkserveError(f"at most {len(LABELS)} arms")
    common = common_settings(settings)
    resolved = [profiles.resolve(profile, root, common, o) for o in ({}, overrides, *more)]
    rules = profile_rules.load(rules_file)
    for label, res in zip(LABELS, resolved, strict=False):
        missing = profile_rules.uncovered(res.profile, rules)
        if missing:
            raise SparkserveError(f"arm {label} ({res.label}): no kernel rule checks {', '.join(missing)}")
    for i, x in enumerate(resolved):
        for y in resolved[:i]:
            if x.profile == y.profile and flags.vllm_argv(x.profile) == flags.vllm_argv(y.profile) \
                    and engine_env(x.env) == engine_env(y.env):
                if y is resolved[0] and i == 1:
                    raise SparkserveError(f"{x.label} resolves to the same server as {y.label}: the arms are "
                                          "identical")
                raise SparkserveError(f"{x.label} resolves to the same server as {y.label}: two arms are "
                                      "identical")
    return tuple(Arm(label, MatrixEntry(res.label, res))
                 for label, res in zip(LABELS, resolved, strict=False))


def schedule(rounds: int, arms: int = 2) -> list[str]:
    if rounds < 1:
        raise SparkserveError("--rounds must be at least 1")
    return list(LABELS[:arms]) * rounds


def spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values),
            "max": max(values), "n": float(len(values))}


# A round in which the arms' medians differ by no more than this (relative to A) is a tie: below it a
# difference is not worth a default, whatever the test says.
FLOOR = 0.005
# Two-sided significance level of the sign test over rounds.
ALPHA = 0.05
FASTER, SLOWER, NO_DIFFERENCE, UNDECIDED = "faster", "slower", "no difference", "undecided"


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven when each decisive round
    is a fair coin (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return float(min(1.0, 2 * tail))


def min_rounds(alpha: float = ALPHA) -> int:
    """The fewest rounds after which the sign test can say faster or slower: all of them one way."""
    n = 1
    while sign_test_p(n, 0) > alpha:
        n += 1
    return n


def compare(a: list[list[float]], b: list[list[float]], floor: float = FLOOR,
            alpha: float = ALPHA, lower_is_better: bool = False) -> dict[str, Any]:
    """Per-round value lists of each arm -> the verdict of B against A, with the round as the unit.

    Each round gives one median per arm and their relative change; a round is B's (change > floor), A's
    (change < -floor) or a tie. B is faster (slower) only when the sign test over the decisive rounds
    rejects "either arm as likely to win a round" at `alpha` and the rounds lean B's (A's) way: with no
    tie that takes at least min_rounds(alpha) rounds. Rounds that disagree give "no difference"; too few
    rounds, or rounds too few of which decide, give "undecided". The pooled medians and quartiles of all
    values are kept to describe the arms, not to judge them. `lower_is_better` (a time): a round's change
    is A's median over B's, minus one, so that B's gain is positive either way."""
    fa, fb = [v for r in a for v in r], [v for r in b for v in r]
    if not fa or not fb:
        raise SparkserveError("an arm has no measured value")
    # A round counts when both arms measured in it (llama-benchy reports no prefill for a request
    # whose prompt came from the prefix cache).
    paired = [(statistics.median(ra), statistics.median(rb))
              for ra, rb in zip(a, b, strict=False) if ra and rb]
    changes = [(ma / mb if lower_is_better else mb / ma) - 1 for ma, mb in paired]
    won = sum(c > floor for c in changes)
    lost = sum(c < -floor for c in changes)
    ties = len(changes) - won - lost
    p = sign_test_p(won, lost)
    need = min_rounds(alpha)
    change = statistics.median(changes) if changes else 0.0
    tally = f"B won {won}, lost {lost}, {ties} within {floor:.1%}, of {len(changes)} rounds"
    if len(changes) < need:
        decision = UNDECIDED
        verdict = (f"undecided: {len(changes)} round(s), the sign test needs at least {need} "
                   f"({change:+.1%} median round change; {tally})")
    elif p <= alpha:
        decision = FASTER if won > lost else SLOWER
        verdict = f"B {decision} by {abs(change):.1%} (median round change; {tally}; sign test p={p:.3f})"
    elif won and lost:
        decision = NO_DIFFERENCE
        verdict = f"no difference: the rounds disagree ({tally}; sign test p={p:.2f})"
    elif not won and not lost:
        decision = NO_DIFFERENCE
        verdict = f"no difference: every round within {floor:.1%} ({tally})"
    else:
        decision = UNDECIDED
        verdict = f"undecided: too few rounds differ beyond {floor:.1%} ({tally}; sign test p={p:.2f})"
    return {"A": spread(fa), "B": spread(fb),
            "round_medians": {"A": [x for x, _ in paired], "B": [y for _, y in paired]},
            "round_changes": changes, "change": change, "floor": floor, "alpha": alpha,
            "rounds_b_won": won, "rounds_b_lost": lost, "rounds_tied": ties, "rounds": len(changes),
            "min_rounds": need, "p_value": p, "decision": decision, "verdict": verdict,
            "b_better": decision == FASTER, **({"lower_is_better": True} if lower_is_better else {})}


Test = tuple[int, int, int, int]  # llama-benchy's (depth, prompt, response, concurrency)


def result_name(metric: str, test: Test, several: bool) -> str:
    """`decode` for an A/B of one test (the `ab` preset); `decode pp512/tg128 c5` per test otherwise."""
    depth, pp, tg, c = test
    return f"{metric} pp{pp}/tg{tg}{f' d{depth}' if depth else ''} c{c}" if several else metric


def judge(per_arm: dict[str, list[Run]], metrics: tuple[str, ...] = tuple(METRICS)) -> dict[str, Any]:
    """The verdict of every metric and every test the arms' runs measured (round i = the i-th run of each
    arm): one verdict per concurrency of a curve, never one over mixed concurrencies."""
    tests = sorted({row.key for r in per_arm["A"] + per_arm["B"] for row in rows(r.bench() or {})})
    return {result_name(metric, t, len(tests) > 1):
            compare([_values(r, t, METRICS[metric]) for r in per_arm["A"]],
                    [_values(r, t, METRICS[metric]) for r in per_arm["B"]],
                    lower_is_better=metric in LOWER_IS_BETTER)
            for metric in metrics for t in tests}


def recompute(record: Run, store: Store) -> dict[str, Any]:
    """The verdicts of a stored A/B, from the benchmark runs its arms name, by today's compare()."""
    meta = record.metadata()
    arms = meta.get("arms") or {}
    per_arm = {label: [store.get(f"{record.hardware}/{rid}")
                       for rid in (arms.get(label) or {}).get("runs", [])] for label in ("A", "B")}
    if not per_arm["A"] or not per_arm["B"]:
        raise SparkserveError(f"{record.run_id}: an arm names no run")
    return judge(per_arm, tuple(meta.get("metrics") or LEGACY_METRICS))


def placements(rounds: int, gpus: tuple[str, ...], arms: int = 2) -> list[dict[str, str]]:
    """Per round, the GPU of each arm, one GPU per arm: the arms rotate over the GPUs (arm i on GPU
    (i + k) mod n in the k-th of n equal blocks of rounds), so a faster card favours each arm in as many
    rounds (and a difference smaller than the cards' own shows as rounds that disagree). Two arms: A on
    the first GPU and B on the second for the first half of the rounds, swapped for the second half."""
    n = len(gpus)
    if n != arms:
        raise SparkserveError(f"{arms} arms need {arms} GPUs, one each; got {','.join(gpus)}")
    if len(set(gpus)) != n:
        many = "two" if n == 2 else str(n)
        raise SparkserveError(f"{many} GPUs are {many} different devices, got {','.join(gpus)}")
    if rounds < n or rounds % n:
        if n == 2:
            raise SparkserveError(f"with two GPUs the rounds must be even (half on each placement), "
                                  f"got {rounds}")
        raise SparkserveError(f"with {n} GPUs the rounds must be a multiple of {n} (as many on each "
                              f"placement), got {rounds}")
    block = rounds // n
    return [{LABELS[i]: gpus[(i + r // block) % n] for i in range(n)} for r in range(rounds)]


def run(profile: str, overrides: dict[str, str], settings: Matrix, root: Path, store: Store,
        rules_file: Path, rounds: int, runs: int, work: Path, concurrent: bool = False,
        gpus: tuple[str, ...] | None = None, preset_name: str = "ab",
        concurrency: list[int] | None = None, sleep: bool = False) -> tuple[Run, dict[str, Any]]:
    """The A/B of two arms (run_arms() with B alone): its record and verdicts."""
    return run_arms(profile, overrides, settings, root, store, rules_file, rounds, runs, work, concurrent,
                    gpus, preset_name, concurrency, sleep=sleep)[0]


def run_arms(profile: str, overrides: dict[str, str], settings: Matrix, root: Path, store: Store,
             rules_file: Path, rounds: int, runs: int, work: Path, concurrent: bool = False,
             gpus: tuple[str, ...] | None = None, preset_name: str = "ab",
             concurrency: list[int] | None = None, more: tuple[dict[str, str], ...] = (),
             sleep: bool = False) -> list[tuple[Run, dict[str, Any]]]:
    """Measure the arms and record each one's comparison with A (B's first); raises before any server
    starts when the arms are not valid.

    restart (default): one engine at a time, a fresh start per arm and round (what fits a Spark).
    concurrent: two engines up at once on one GPU (B on the next port), started once, requests
    alternating round by round; needs memory for two engines (GPU_MEMORY_UTILIZATION in the settings).
    gpus (one device per arm): all engines up at once, each on its own GPU (arm i on the i-th next port),
    requests alternating arm by arm; the placements rotate (placements()), each change a restart of
    every engine.
    preset_name: the benchmark of each arm and round (default `ab`, pp2048/tg128 at c=1; `concurrency`
    or `load` for a curve, judged per concurrency); concurrency: a subset of the preset's concurrencies
    (the points a change is about and their neighbours: a whole curve per arm and round takes minutes)."""
    if concurrent and gpus:
        raise SparkserveError("--concurrent shares one GPU, --gpus gives each arm its own: choose one")
    if concurrent and more:
        raise SparkserveError("--concurrent holds two engines on one GPU: more arms need --gpus")
    if sleep and (concurrent or gpus):
        raise SparkserveError("--sleep keeps one engine awake at a time on one GPU; --concurrent and --gpus "
                              "keep all awake: choose one")
    if sleep and more:
        raise SparkserveError("--sleep holds a sleeping engine's weights in host memory: two arms (more "
                              "arms need --gpus)")
    arms = list(plan(profile, overrides, settings, root, rules_file, more))
    where = placements(rounds, gpus, len(arms)) if gpus else None
    if concurrent or gpus or sleep:
        base = int(arms[0].entry.resolved.env["SPARKSERVE_PORT"])
        arms = [_on_port(arm, base + i, sleep) if i or sleep else arm for i, arm in enumerate(arms)]
    srv = settings.server
    preset = presets.get(preset_name).with_overrides(concurrency=concurrency, runs=runs)
    random_weights = settings.random_weights
    hw = settings.hardware or metadata.hardware_label(metadata.gpus())
    per_arm: dict[str, list[Run]] = {arm.label: [] for arm in arms}
    invalid: list[str] = []
    # Speculation's own counters per arm and round (a fresh engine per round in restart mode): the
    # acceptance length behind B's speed, measured on the same requests.
    accepted: dict[str, list[dict[str, Any]]] = {arm.label: [] for arm in arms}
    servers: dict[str, Server] = {}
    commands: dict[str, list[str]] = {}
    switches: list[dict[str, Any]] = []  # sleep mode: each change of the awake engine and what it took
    t0 = time.monotonic()

    def up(arm: Arm, gpu: str | None = None) -> Server:
        if arm.label not in servers:
            env = {**srv.env, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})}
            server = server_for(arm.entry, replace(srv, env=env), work, root)
            servers[arm.label] = server
            server.start(srv.ready_timeout_s)
            commands[arm.label] = server.vllm_command
        return servers[arm.label]

    def down(label: str) -> None:
        s = servers.pop(label, None)
        if s is not None:
            s.stop()

    def place(gpu_of: dict[str, str]) -> None:
        """Every engine (re)started, each on its GPU, side by side: they share no memory."""
        for label in list(servers):
            down(label)
        say("==> A/B placement: " + ", ".join(f"arm {a.label} on GPU {gpu_of[a.label]}" for a in arms))
        with ThreadPoolExecutor(max_workers=len(arms)) as pool:
            for f in [pool.submit(up, arm, gpu_of[arm.label]) for arm in arms]:
                f.result()

    def measure(arm: Arm, tag: str) -> tuple[Run, bool]:
        server = up(arm)
        l1 = smoke.run(Client(server.base_url), random_weights=random_weights)
        l1_file = work / f"ab-{tag}-{arm.label}-level1.json"
        l1.write(l1_file)
        r, res = benchmark.run(benchmark.BenchSpec(
            base_url=server.base_url, tokenizer=Path(settings.tokenizer), preset=preset,
            configuration=arm.entry.name, store=store.root, root=root, hardware=hw,
            engine_log=server.log, server_pid=server.pid, serve_python=srv.python,
            kernel_rules=rules_file, token_relay=random_weights, random_weights=random_weights,
            attach=(l1_file,),
            profile=profile_record(arm.entry.resolved.name, arm.entry.resolved.env,
                                   arm.entry.resolved.overrides),
        ))
        if arm.entry.resolved.profile.speculative != "off":
            accepted[arm.label].append(_speculation(server.base_url))
        ok = res.ok and l1.ok and r.status() == "valid"
        if not ok:
            invalid.append(f"{r.run_id} ({r.status()}, level 1 {'PASS' if l1.ok else 'FAIL'}, "
                           f"level 4 {'PASS' if res.ok else 'FAIL'})")
        return r, ok

    awake: list[str] = []  # sleep mode: the engine awake

    def wake(arm: Arm) -> None:
        """Sleep mode: `arm`'s engine the only one awake."""
        if awake == [arm.label]:
            return
        entry: dict[str, Any] = {"awake": arm.label}
        if awake:
            entry["sleep_s"] = sleep_engine(servers[awake[0]])
        entry["wake_s"] = wake_engine(servers[arm.label])
        say(f"==> arm {arm.label} awake ({entry['wake_s']:.1f} s"
            + (f"; arm {awake[0]} asleep in {entry['sleep_s']:.1f} s)" if awake else ")"))
        awake[:] = [arm.label]
        switches.append(entry)

    try:
        if concurrent:
            for arm in arms:
                up(arm)  # one after the other: each sizes itself from the memory the other left
        if sleep:
            for i, arm in enumerate(arms):
                if i:  # asleep before the next starts: that one sizes itself from a GPU the other freed
                    sleep_engine(servers[arms[i - 1].label])
                up(arm)
            awake[:] = [arms[-1].label]
        step = 0
        for rnd in range(rounds):
            if where is not None and (rnd == 0 or where[rnd] != where[rnd - 1]):
                place(where[rnd])
            for arm in arms:
                step += 1
                say(f"==> A/B {step}/{rounds * len(arms)}: arm {arm.label} ({arm.entry.name})")
                if sleep:
                    wake(arm)
                per_arm[arm.label].append(measure(arm, str(step))[0])
                if not concurrent and not sleep and where is None:
                    down(arm.label)
    finally:
        for label in list(servers):
            down(label)
    mode = ("sleep" if sleep else "concurrent" if concurrent else "restart" if where is None
            else "two-gpus" if len(arms) == 2 else "gpus")
    wall = time.monotonic() - t0
    out = []
    for arm in arms[1:]:
        pair = {"A": per_arm["A"], "B": per_arm[arm.label]}
        results = judge(pair)
        bad = [x for x in invalid if any(x.startswith(r.run_id) for r in pair["A"] + pair["B"])]
        placed = [{"A": p["A"], "B": p[arm.label]} for p in where] if where else None
        sitting = {a.label: a.entry.name for a in arms} if len(arms) > 2 else None
        record = _write(store, hw, profile, arm.entry.resolved.overrides, arms[0], Arm("B", arm.entry),
                        schedule(rounds), runs, pair, results, bad, wall, mode,
                        {"A": commands.get("A", []), "B": commands.get(arm.label, [])},
                        {"A": accepted["A"], "B": accepted[arm.label]}, placed, preset.to_dict(), sitting,
                        switches)
        out.append((record, results))
    return out


# vLLM's sleep mode: the flag that allocates weights and KV cache so that they can be released, and the
# variable that serves /sleep, /wake_up and /is_sleeping.
SLEEP_FLAG = "--enable-sleep-mode"
SLEEP_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
# A level-1 sleep copies the engine's weights to host memory (64 GiB for gpt-oss-120b on Marlin's MoE).
SLEEP_TIMEOUT_S = 600
# vLLM backs each weight allocation up in pinned host memory, and torch's pinned allocator rounds a request
# up to a power of two unless it is over this threshold: without it an engine of 63.95 GiB of weights held
# 118 GiB of shared memory when the kernel's OOM killer ended it during /sleep on a one-H100 host of 125 GiB
# (docs/GPU.md section 4). Torch's allocator setting, added to each sleep-mode engine's.
PINNED_NO_ROUNDING = "pinned_max_round_threshold_mb:64"
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
# What a sleeping engine may then hold of the host's memory, as a multiple of its weights: the allocations
# under the threshold still round up (an estimate; a sitting's /sleep measures it).
SLEEP_HOST_FACTOR = 1.25
# vLLM's line for the weights an engine loaded onto its GPU.
WEIGHTS_LINE = re.compile(r"Model loading took ([0-9.]+) GiB")


def _on_port(arm: Arm, port: int, sleep: bool = False) -> Arm:
    """ARM served on PORT; with SLEEP, with vLLM's sleep mode on."""
    env = {**arm.entry.resolved.env, "SPARKSERVE_PORT": str(port)}
    if sleep:
        extra = env.get("VLLM_EXTRA_ARGS", "").strip()
        env = {**env, **SLEEP_ENV, "VLLM_EXTRA_ARGS": f"{extra} {SLEEP_FLAG}".strip()}
        var = next((v for v in ALLOC_CONF_VARS if env.get(v)), ALLOC_CONF_VARS[0])
        env[var] = ",".join(x for x in (env.get(var, ""), PINNED_NO_ROUNDING) if x)
    moved = profiles.Resolved(arm.entry.resolved.name, env, parse(env), arm.entry.resolved.overrides)
    return Arm(arm.label, MatrixEntry(arm.entry.name, moved))


def engine_weights_gib(log: Path) -> float | None:
    """The GiB of weights the engine of `log` loaded, or None where its log does not say (yet)."""
    try:
        found = WEIGHTS_LINE.findall(log.read_text(errors="replace"))
    except OSError:
        return None
    return float(found[-1]) if found else None


def check_sleep_memory(server: Server, available: int) -> None:
    """Refuse to put SERVER's engine to sleep where the host's `available` bytes cannot hold what a sleeping
    engine keeps of its weights (an OOM kill of the engine, minutes into the A/B, otherwise)."""
    weights = engine_weights_gib(server.log)
    if weights is None:
        return
    need = weights * SLEEP_HOST_FACTOR * 2**30
    if need > available:
        raise SparkserveError(
            f"--sleep: the engine at {server.base_url} loaded {weights:.2f} GiB of weights; asleep it keeps "
            f"them in host memory, up to {need / 2**30:.0f} GiB, and this host has "
            f"{available / 2**30:.0f} GiB "
            f"available. Compare without --sleep (restart mode), or on a host with more memory")


def sleep_engine(server: Server) -> float:
    """Put SERVER's engine to sleep (level 1); the seconds it took. Refused first where the host's memory
    cannot hold its weights (check_sleep_memory)."""
    import psutil

    check_sleep_memory(server, psutil.virtual_memory().available)
    t0 = time.monotonic()
    Client(server.base_url).post("/sleep?level=1", {}, timeout=SLEEP_TIMEOUT_S)
    return time.monotonic() - t0


def wake_engine(server: Server) -> float:
    """Wake SERVER's engine; the seconds it took. Refused when it says it still sleeps."""
    t0 = time.monotonic()
    client = Client(server.base_url)
    client.post("/wake_up", {}, timeout=SLEEP_TIMEOUT_S)
    state = client.get("/is_sleeping") or {}
    if state.get("is_sleeping") is not False:
        raise SparkserveError(f"{server.base_url}: still asleep after /wake_up ({state}); its log: "
                              f"{server.log}")
    return time.monotonic() - t0


def _speculation(base_url: str) -> dict[str, Any]:
    """The engine's speculation counters since it started (concurrent mode: cumulative over rounds)."""
    try:
        return dict(spec_metrics.read(base_url).to_dict())
    except SparkserveError as exc:
        return {"error": str(exc)}


def _values(r: Run, key: tuple[int, int, int, int], metric: str) -> list[float]:
    """The values of one llama-benchy test: per request (its JSON keeps them under `values`; at
    concurrency > 1 its throughputs are per batch), or each batch's end-to-end tok/s (batches.json)."""
    if metric == "e2e_tps":
        return e2e_values(r.batches(), key)
    name = {"tg_tps": "tg_throughput", "pp_tps": "pp_throughput", "e2e_ttft": "e2e_ttft"}[metric]
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
           accepted: dict[str, list[dict[str, Any]]] | None = None,
           placed: list[dict[str, str]] | None = None, bench: dict[str, Any] | None = None,
           sitting: dict[str, str] | None = None, switches: list[dict[str, Any]] | None = None) -> Run:
    """The A/B record; `commands` are vLLM's command lines as the entrypoint started them (the launch
    plans: the harness's Python and host), not the image's; `placed`: each round's GPU per arm (GPU
    modes); `sitting`: every arm of a sitting of more than two, by its label there (B of this record is
    one of them); `switches`: sleep mode's changes of the awake engine, with the seconds each took."""
    label = b.entry.resolved.label
    record = store.new_record(hw, f"ab-{label}")
    first = (per_arm["A"] or per_arm["B"])[0].metadata()
    write_json(record.file(METADATA), {
        "schema": 1, "kind": KIND_AB, "name": f"{a.entry.name} vs {label}",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "hardware": hw,
        "profile": profile, "overrides": overrides, "order": "".join(order), "mode": mode,
        "runs_per_round": runs, "metrics": list(METRICS), **({"placements": placed} if placed else {}),
        **({"sitting_arms": sitting} if sitting else {}),
        **({"sleep_switches": [{k: round(v, 1) if isinstance(v, float) else v for k, v in e.items()}
                               for e in switches]} if switches else {}),
        **({"preset": bench} if bench else {}),
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
        unit = UNITS[metric.split()[0]]
        out.append(f"{metric:8s} A {a['median']:10,.1f} [{a['q1']:,.1f}-{a['q3']:,.1f}]  "
                   f"B {b['median']:10,.1f} [{b['q1']:,.1f}-{b['q3']:,.1f}] {unit}  "
                   f"{r['verdict']}")
    return out
