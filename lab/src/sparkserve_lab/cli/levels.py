"""The lab's test levels (docs/LEVELS.md); levels 1 and 2 are the product's deploy gate (`sparkserve level`).

    sparkserve-lab level 1.5 --configuration C --log FILE        engine log vs lab/configs/engine-kernels.toml
    sparkserve-lab level 3   --base-url URL                      stress
    sparkserve-lab level 4   --base-url URL --tokenizer DIR ...  llama-benchy into the run store
    sparkserve-lab level 5   --run RUN                           regression vs the stored baseline
    sparkserve-lab level 6   MATRIX.yaml                         every configuration: levels 1, 1.5, 4
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, finish, int_list_arg, path_arg, root
from sparkserve.cli.levels import client_from_args, server_args
from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve_lab.cli.common import DEFAULT_KERNEL_RULES, DEFAULT_STORE, store_args


def cmd_bench(a: argparse.Namespace) -> int:
    from sparkserve_lab.bench import presets
    from sparkserve_lab.levels import benchmark

    preset = presets.get(a.preset).with_overrides(a.pp, a.tg, a.depth, a.concurrency, a.runs)
    profile = None
    if a.profile:
        from sparkserve.serving import profiles
        from sparkserve_lab.validate.runs import profile_record

        resolved = profiles.resolve(a.profile, root(), common=profiles.parse_set(a.set))
        profile = profile_record(resolved.name, resolved.env, resolved.overrides)
    spec = benchmark.BenchSpec(
        base_url=a.base_url,
        tokenizer=Path(a.tokenizer),
        preset=preset,
        configuration=a.configuration,
        store=path_arg(a, "store", DEFAULT_STORE),
        root=root(),
        hardware=a.hardware,
        model=a.model,
        engine_log=Path(a.engine_log) if a.engine_log else None,
        trace=Path(a.trace) if a.trace else None,
        kernel_rules=path_arg(a, "rules", DEFAULT_KERNEL_RULES),
        server_pid=a.server_pid,
        serve_python=a.serve_python,
        book=Path(a.book) if a.book else None,
        allow_errors=a.allow_errors,
        attach=tuple(Path(p) for p in a.attach or []),
        timeout_s=a.timeout,
        token_relay=a.token_relay or a.random_weights,
        random_weights=a.random_weights,
        profile=profile,
    )
    run, res = benchmark.run(spec)
    if a.set_baseline and res.ok:
        from sparkserve_lab.runstore import Store

        Store(spec.store).set_baseline(run)
        say(f"baseline for {run.hardware}/{run.configuration}: {run.run_id}")
    print(run.path)
    return finish(res, a.json_out)


def _bench_args(sp: argparse.ArgumentParser) -> None:
    from sparkserve_lab.bench.presets import PRESETS

    sp.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:8000")
    sp.add_argument(
        "--tokenizer", required=True, help="local tokenizer dir (tokenizer.json) for llama-benchy"
    )
    sp.add_argument(
        "--preset",
        default="quick",
        choices=sorted(PRESETS),
        help="; ".join(f"{p.name}: {p.description}" for p in PRESETS.values()),
    )
    sp.add_argument("--pp", type=int_list_arg(), help="override prompt sizes, e.g. '256' (>= 1)")
    sp.add_argument("--tg", type=int_list_arg(), help="override generation sizes (>= 1)")
    sp.add_argument("--depth", type=int_list_arg(minimum=0),
                    help="override context depths, e.g. '0,1024,2048' (0: no context)")
    sp.add_argument("--concurrency", type=int_list_arg(), help="override concurrency levels (>= 1)")
    sp.add_argument("--runs", type=int, help="override runs per test")
    sp.add_argument(
        "--configuration",
        required=True,
        help=f"configuration name (a key of {DEFAULT_KERNEL_RULES} for validation)",
    )
    sp.add_argument("--model", help="served model name (default: the first of /v1/models)")
    sp.add_argument("--profile", help="the serving profile the server runs: recorded, and its kernel rules "
                                      "validate the run (instead of --configuration's)")
    sp.add_argument("--set", action="append", metavar="VAR=VALUE",
                    help="with --profile: a setting the server ran with besides the profile file "
                         "(repeatable)")
    sp.add_argument("--engine-log", help="the engine's log: copied into the run and validated (level 1.5)")
    sp.add_argument("--trace", help="a torch profiler trace (Chrome JSON) for the kernel validation")
    sp.add_argument("--server-pid", type=int, help="the server's pid: flags, env and memory from /proc")
    sp.add_argument(
        "--serve-python", help="the serving environment's python (pip freeze, versions, manifest)"
    )
    sp.add_argument("--book", help="benchmark text file (default: generated pseudo-English)")
    sp.add_argument("--allow-errors", action="store_true", help="do not fail on failed benchmark requests")
    sp.add_argument("--attach", action="append", help="a level result JSON to store with the run")
    sp.add_argument("--set-baseline", action="store_true", help="make this run the level-5 baseline")
    sp.add_argument("--timeout", type=float, help="seconds before llama-benchy is stopped")
    sp.add_argument(
        "--random-weights",
        action="store_true",
        help="the server has random weights (--load-format dummy): recorded, implies --token-relay",
    )
    sp.add_argument(
        "--token-relay",
        action="store_true",
        help="relay llama-benchy through sparkserve_lab.bench.relay (random-weight gpt-oss; see there)",
    )
    store_args(sp)
    sp.add_argument("--json-out", help="write the level result here")
    sp.set_defaults(func=cmd_bench)


def cmd_level1_5(a: argparse.Namespace) -> int:
    from sparkserve.serving import profiles
    from sparkserve_lab.runstore import Store, write_json
    from sparkserve_lab.validate import profile_rules, runs
    from sparkserve_lab.validate.kernels import validate_files, validate_log

    rules_file = path_arg(a, "rules", DEFAULT_KERNEL_RULES)
    trace = Path(a.trace) if a.trace else None
    if a.run:
        run = Store(path_arg(a, "store", DEFAULT_STORE)).get(a.run)
        log = Path(a.log) if a.log else run.engine_log()
        if log is None:
            raise SparkserveError(f"{run.run_id} has no engine log: give one with --log")
        cfg = a.configuration or run.configuration
        rules = runs.rules_for({} if a.configuration else run.metadata(), cfg, rules_file)
        if rules is None:
            raise SparkserveError(f"{run.run_id}: {cfg!r} is neither a profile run nor a configuration of "
                                  f"{rules_file}")
        return OK if runs.validate(run, rules, rules_file, log, trace).valid else FAILED
    if not a.log or not (a.configuration or a.profile):
        raise SparkserveError("give --log and --configuration or --profile (or --run RUN from the store)")
    if a.profile:
        res = profiles.resolve(a.profile, root(), overrides=profiles.parse_set(a.set))
        rules = profile_rules.rules_for(res.profile, profile_rules.load(rules_file), res.label, res.env)
        v = validate_log(rules, rules_file, Path(a.log), trace)
    else:
        v = validate_files(rules_file, a.configuration, Path(a.log), trace)
    if a.json_out:
        write_json(Path(a.json_out), v.to_dict())
    runs.say_validation(v)
    return OK if v.valid else FAILED


def _validate_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--configuration", help="a key of lab/configs/engine-kernels.toml")
    sp.add_argument("--profile", help="a serving profile (profiles/NAME.env): its variables give the rules")
    sp.add_argument("--set", action="append", metavar="VAR=VALUE", help="with --profile: an override")
    sp.add_argument("--log", help="engine log (default with --run: the run's engine.log)")
    sp.add_argument("--trace", help="torch profiler trace (Chrome JSON, .json or .json.gz)")
    sp.add_argument("--run", help="a stored run: its validation.json is (re)written, marking it (in)valid")
    sp.add_argument("--json-out", help="write the validation here (without --run)")
    store_args(sp)
    sp.set_defaults(func=cmd_level1_5)


def cmd_level3(a: argparse.Namespace) -> int:
    from sparkserve_lab.levels import stress

    res = stress.run(
        client_from_args(a),
        a.model,
        a.sequential,
        a.requests,
        a.concurrency,
        a.long_tokens,
        a.max_tokens,
        a.server_pid,
        Path(a.engine_log) if a.engine_log else None,
    )
    return finish(res, a.json_out)


def cmd_level5(a: argparse.Namespace) -> int:
    from sparkserve_lab.levels import regression
    from sparkserve_lab.runstore import Store

    store = Store(path_arg(a, "store", DEFAULT_STORE))
    if a.run:
        cand = store.get(a.run)
    else:
        if not a.hardware or not a.configuration:
            raise SparkserveError("give --run, or --hardware and --configuration for their latest run")
        latest = store.latest(a.hardware, a.configuration)
        if latest is None:
            raise SparkserveError(f"no run of {a.configuration} on {a.hardware} in {store.root}")
        cand = latest
    base = store.get(a.baseline) if a.baseline else store.baseline(cand.hardware, cand.configuration)
    if base is None:
        raise SparkserveError(
            f"no baseline for {cand.configuration} on {cand.hardware}: "
            "`sparkserve baseline set RUN` (or bench --set-baseline) first"
        )
    if base.path == cand.path:
        raise SparkserveError(f"{cand.run_id} is its own baseline: nothing to compare")
    res = regression.run(base, cand, a.max_drop, int(a.max_mem_growth_gb * regression.GB))
    cand.record_level("5", res.to_dict())
    return finish(res, a.json_out)


def cmd_level6(a: argparse.Namespace) -> int:
    from sparkserve_lab.levels import matrix

    res = matrix.run(
        Path(a.matrix), path_arg(a, "store", DEFAULT_STORE), root(), a.only, Path(a.work) if a.work else None
    )
    return finish(res, a.json_out)


def register(sub: Any) -> None:
    lv = sub.add_parser("level", help="test levels 1.5 and 3-6 (1 and 2, the deploy gate: `sparkserve level`)"
                        ).add_subparsers(dest="level", required=True)
    _validate_args(lv.add_parser("1.5", help="kernels: engine log (+trace) vs the kernel rules"))

    sp = lv.add_parser("3", help="stress: sequential, concurrent, long context; zero errors, no restart")
    server_args(sp)
    sp.add_argument("--sequential", type=int, default=100)
    sp.add_argument("--requests", type=int, default=40, help="requests in the concurrent phase")
    sp.add_argument("--concurrency", type=int, default=4)
    sp.add_argument("--long-tokens", type=int, default=4096, help="prompt tokens of the long-context request")
    sp.add_argument("--max-tokens", type=int, default=16)
    sp.add_argument("--server-pid", type=int)
    sp.add_argument("--engine-log")
    sp.set_defaults(func=cmd_level3)

    _bench_args(lv.add_parser("4", help="benchmark: llama-benchy into the run store"))

    sp = lv.add_parser("5", help="regression vs the stored baseline of the same hardware/configuration")
    sp.add_argument("--run", help="the run to check (default: latest of --hardware/--configuration)")
    sp.add_argument("--configuration")
    sp.add_argument("--baseline", help="compare against this run instead of the stored baseline")
    sp.add_argument("--max-drop", type=float, default=0.03, help="largest tolerated throughput drop (0.03)")
    sp.add_argument("--max-mem-growth-gb", type=float, default=1.0)
    sp.add_argument("--json-out")
    store_args(sp)
    sp.set_defaults(func=cmd_level5)

    sp = lv.add_parser("6", help="matrix: configurations from a YAML file, each with levels 1, 1.5, 4")
    sp.add_argument("matrix", help="e.g. lab/configs/matrix-spark.yaml")
    sp.add_argument("--only", action="append", help="run only this configuration (repeatable)")
    sp.add_argument("--work", help="server logs (default .work/matrix)")
    sp.add_argument("--json-out")
    sp.add_argument("--store")
    sp.set_defaults(func=cmd_level6)

