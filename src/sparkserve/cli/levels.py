"""Subcommands of the benchmark / validation harness (issue 5), registered by `cli.build_parser`.

sparkserve tiny-model --out DIR                 tiny random Llama for CPU tests
sparkserve gptoss-dummy --out DIR               config-only gpt-oss checkpoint + o200k_harmony tokenizer
sparkserve bench      --base-url URL ...        llama-benchy into results/<hardware>/<run-id>/ (= level 4)
sparkserve metadata   [--out FILE] ...          the metadata record alone
sparkserve validate kernels --configuration C --log FILE [--run RUN]   (= level 1.5)
sparkserve level {1,1.5,2,3,4,5,6} ...          the test levels
sparkserve baseline set RUN                     make RUN the level-5 baseline of its hardware+configuration
sparkserve report                               docs/BENCHMARK_RESULTS.md + PNG plots from the store
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.progress import say

DEFAULT_STORE = "results"
DEFAULT_EXPECTATIONS = "configs/kernel-expectations.toml"


def _root() -> Path:
    from sparkserve.supply import pins

    try:
        return pins.find_root()
    except SparkserveError:
        return Path.cwd()


def _path(a: argparse.Namespace, name: str, default: str) -> Path:
    v = getattr(a, name, None)
    return Path(v) if v else _root() / default


def _ints(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError as exc:
        raise SparkserveError(f"not a list of integers: {text!r}") from exc


def _finish(res: Any, json_out: str | None) -> int:
    res.write(Path(json_out) if json_out else None)
    say(res.summary())
    return 0 if res.ok else 1


# ---- tiny-model ---------------------------------------------------------------------------------------
def cmd_tiny_model(a: argparse.Namespace) -> int:
    from sparkserve.testing import tinymodel

    spec = tinymodel.TinySpec(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=2 * a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.hidden // 64,
        num_key_value_heads=1,
        max_position_embeddings=a.max_len,
        seed=a.seed,
    )
    print(tinymodel.make(Path(a.out), spec))
    return 0


# ---- gptoss-dummy ---------------------------------------------------------------------------------------
def cmd_gptoss_dummy(a: argparse.Namespace) -> int:
    from sparkserve.testing import gptoss_dummy

    out = gptoss_dummy.make(
        Path(a.out),
        a.size,
        Path(a.tokenizer_json) if a.tokenizer_json else None,
        Path(a.save_tokenizer) if a.save_tokenizer else None,
    )
    print(out)
    return 0


# ---- bench / level 4 ----------------------------------------------------------------------------------
def cmd_bench(a: argparse.Namespace) -> int:
    from sparkserve.harness.bench import presets
    from sparkserve.harness.levels import benchmark

    preset = presets.get(a.preset).with_overrides(
        _ints(a.pp), _ints(a.tg), _ints(a.depth), _ints(a.concurrency), a.runs
    )
    spec = benchmark.BenchSpec(
        base_url=a.base_url,
        tokenizer=Path(a.tokenizer),
        preset=preset,
        configuration=a.configuration,
        store=_path(a, "store", DEFAULT_STORE),
        root=_root(),
        hardware=a.hardware,
        model=a.model,
        engine_log=Path(a.engine_log) if a.engine_log else None,
        trace=Path(a.trace) if a.trace else None,
        expectations=_path(a, "expectations", DEFAULT_EXPECTATIONS),
        server_pid=a.server_pid,
        serve_python=a.serve_python,
        book=Path(a.book) if a.book else None,
        allow_errors=a.allow_errors,
        attach=tuple(Path(p) for p in a.attach or []),
        timeout_s=a.timeout,
        token_relay=a.token_relay or a.random_weights,
        random_weights=a.random_weights,
    )
    run, res = benchmark.run(spec)
    if a.set_baseline and res.ok:
        from sparkserve.harness.runstore import Store

        Store(spec.store).set_baseline(run)
        say(f"baseline for {run.hardware}/{run.configuration}: {run.run_id}")
    print(run.path)
    return _finish(res, a.json_out)


def _bench_args(sp: argparse.ArgumentParser) -> None:
    from sparkserve.harness.bench.presets import PRESETS

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
    sp.add_argument("--pp", help="override prompt sizes, e.g. '256'")
    sp.add_argument("--tg", help="override generation sizes")
    sp.add_argument("--depth", help="override depths, e.g. '0 1024 2048'")
    sp.add_argument("--concurrency", help="override concurrency levels")
    sp.add_argument("--runs", type=int, help="override runs per test")
    sp.add_argument(
        "--configuration",
        required=True,
        help="configuration name (a key of configs/kernel-expectations.toml for validation)",
    )
    sp.add_argument("--model", help="served model name (default: the first of /v1/models)")
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
        help="relay llama-benchy through sparkserve.harness.bench.relay (random-weight gpt-oss; see there)",
    )
    _store_args(sp)
    sp.add_argument("--json-out", help="write the level result here")
    sp.set_defaults(func=cmd_bench)


def _store_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.add_argument(
        "--hardware", help="results/<hardware>/ label (default: detected GPU, else cpu-<arch>-<n>c)"
    )
    sp.add_argument("--expectations", help=f"default: <repo>/{DEFAULT_EXPECTATIONS}")


# ---- metadata -----------------------------------------------------------------------------------------
def cmd_metadata(a: argparse.Namespace) -> int:
    from sparkserve.harness import metadata

    rec = metadata.collect(
        root=_root(),
        configuration=a.configuration,
        base_url=a.base_url,
        server_pid=a.server_pid,
        serve_python=a.serve_python,
        hardware=a.hardware,
    )
    text = json.dumps(rec, indent=2, default=str) + "\n"
    if a.out:
        Path(a.out).write_text(text)
        print(a.out)
    else:
        print(text, end="")
    return 0


# ---- validate kernels / level 1.5 -------------------------------------------------------------------------
def cmd_validate_kernels(a: argparse.Namespace) -> int:
    from sparkserve.harness.levels.benchmark import say_validation, validate_run
    from sparkserve.harness.runstore import ENGINE_LOG, Store, write_json
    from sparkserve.harness.validate.kernels import validate_files

    exp = _path(a, "expectations", DEFAULT_EXPECTATIONS)
    trace = Path(a.trace) if a.trace else None
    if a.run:
        run = Store(_path(a, "store", DEFAULT_STORE)).get(a.run)
        log = Path(a.log) if a.log else run.file(ENGINE_LOG)
        cfg = a.configuration or run.configuration
        return 0 if validate_run(run, cfg, exp, log, trace) else 1
    if not a.log or not a.configuration:
        raise SparkserveError("give --log and --configuration (or --run RUN from the store)")
    v = validate_files(exp, a.configuration, Path(a.log), trace)
    if a.json_out:
        write_json(Path(a.json_out), v.to_dict())
    say_validation(v)
    return 0 if v.valid else 1


def _validate_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--configuration", help="a key of configs/kernel-expectations.toml")
    sp.add_argument("--log", help="engine log (default with --run: the run's engine.log)")
    sp.add_argument("--trace", help="torch profiler trace (Chrome JSON, .json or .json.gz)")
    sp.add_argument("--run", help="a stored run: its validation.json is (re)written, marking it (in)valid")
    sp.add_argument("--json-out", help="write the validation here (without --run)")
    _store_args(sp)
    sp.set_defaults(func=cmd_validate_kernels)


# ---- levels ---------------------------------------------------------------------------------------------
def _client(a: argparse.Namespace) -> Any:
    from sparkserve.harness.levels.common import Client

    return Client(a.base_url, timeout=a.request_timeout)


def _server_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--base-url", required=True)
    sp.add_argument("--model", help="served model name (default: the first of /v1/models)")
    sp.add_argument("--request-timeout", type=float, default=600)
    sp.add_argument("--json-out", help="write the level result (JSON) here")


def cmd_level1(a: argparse.Namespace) -> int:
    from sparkserve.harness.levels import smoke

    return _finish(smoke.run(_client(a), a.model, a.harmony, a.max_tokens, a.random_weights), a.json_out)


def cmd_level2(a: argparse.Namespace) -> int:
    from sparkserve.harness.levels import correctness

    res = correctness.run(
        _client(a),
        a.model,
        Path(a.reference) if a.reference else None,
        Path(a.record) if a.record else None,
        a.configuration,
        a.max_tokens,
        a.min_prefix,
        a.min_mean_fraction,
        a.harmony,
        a.real_checkpoint,
    )
    return _finish(res, a.json_out)


def cmd_level3(a: argparse.Namespace) -> int:
    from sparkserve.harness.levels import stress

    res = stress.run(
        _client(a),
        a.model,
        a.sequential,
        a.requests,
        a.concurrency,
        a.long_tokens,
        a.max_tokens,
        a.server_pid,
        Path(a.engine_log) if a.engine_log else None,
    )
    return _finish(res, a.json_out)


def cmd_level5(a: argparse.Namespace) -> int:
    from sparkserve.harness.levels import regression
    from sparkserve.harness.runstore import Store

    store = Store(_path(a, "store", DEFAULT_STORE))
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
    return _finish(res, a.json_out)


def cmd_level6(a: argparse.Namespace) -> int:
    from sparkserve.harness.levels import matrix

    res = matrix.run(
        Path(a.matrix), _path(a, "store", DEFAULT_STORE), _root(), a.only, Path(a.work) if a.work else None
    )
    return _finish(res, a.json_out)


def cmd_baseline_set(a: argparse.Namespace) -> int:
    from sparkserve.harness.runstore import Store

    store = Store(_path(a, "store", DEFAULT_STORE))
    run = store.get(a.run)
    store.set_baseline(run)
    print(f"{run.hardware}/{run.configuration}: {run.run_id}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from sparkserve.harness.report import anchors, markdown
    from sparkserve.harness.runstore import Store

    root = _root()
    out = Path(a.out) if a.out else root / "docs" / "BENCHMARK_RESULTS.md"
    img = Path(a.img_dir) if a.img_dir else out.parent / "img" / "benchmarks"
    anchor_file = Path(a.anchors) if a.anchors else root.parent / "shared" / "ANCHORS.md"
    found = anchors.load(anchor_file)
    if not found:
        say(f"  note: no anchors read from {anchor_file}")
    src = "../shared/ANCHORS.md" if not a.anchors else a.anchors
    print(markdown.write(Store(_path(a, "store", DEFAULT_STORE)), found, out, img, src, not a.no_plots))
    return 0


def register(sub: Any) -> None:
    """Add the harness subcommands to `sub` (the result of `add_subparsers`)."""
    sp = sub.add_parser("tiny-model", help="write a tiny random Llama checkpoint (offline, CPU tests)")
    sp.add_argument("--out", required=True, help="directory to write")
    sp.add_argument("--vocab", type=int, default=2048, help="BPE vocabulary size (default 2048)")
    sp.add_argument("--hidden", type=int, default=128, help="a multiple of 64 (head_dim is 64)")
    sp.add_argument("--layers", type=int, default=2)
    sp.add_argument("--max-len", type=int, default=16384, help="max_position_embeddings")
    sp.add_argument("--seed", type=int, default=0)
    sp.set_defaults(func=cmd_tiny_model)

    sp = sub.add_parser(
        "gptoss-dummy", help="config-only gpt-oss checkpoint + o200k_harmony tokenizer (--load-format dummy)"
    )
    sp.add_argument("--out", required=True, help="directory to write")
    sp.add_argument("--size", choices=["120b", "20b", "tiny"], default="120b", help="tiny: CPU plumbing")
    sp.add_argument("--tokenizer-json", help="prebuilt tokenizer.json(.gz) to use instead of building it")
    sp.add_argument("--save-tokenizer", help="also write the tokenizer.json gzipped here (for shipping)")
    sp.set_defaults(func=cmd_gptoss_dummy)

    _bench_args(sub.add_parser("bench", help="llama-benchy into the run store (level 4)"))

    sp = sub.add_parser("metadata", help="print (or --out) the metadata record of this host/server")
    sp.add_argument("--configuration", default="unknown")
    sp.add_argument("--base-url")
    sp.add_argument("--server-pid", type=int)
    sp.add_argument("--serve-python")
    sp.add_argument("--hardware")
    sp.add_argument("--out")
    sp.set_defaults(func=cmd_metadata)

    val = sub.add_parser("validate", help="validation of runs").add_subparsers(dest="what", required=True)
    _validate_args(val.add_parser("kernels", help="level 1.5: engine log (+trace) vs kernel expectations"))

    lv = sub.add_parser("level", help="test levels 1-6").add_subparsers(dest="level", required=True)
    sp = lv.add_parser("1", help="smoke: up, /v1/models, one chat completion, harmony reasoning (gpt-oss)")
    _server_args(sp)
    sp.add_argument("--harmony", choices=["auto", "required", "skip"], default="auto")
    sp.add_argument("--max-tokens", type=int, default=64)
    sp.add_argument(
        "--random-weights",
        action="store_true",
        help="random-weight server: the harmony check is reported not applicable (never a pass)",
    )
    sp.set_defaults(func=cmd_level1)

    _validate_args(lv.add_parser("1.5", help="kernels: same as `validate kernels`"))

    sp = lv.add_parser(
        "2", help="correctness: temperature-0 tokens vs reference, harmony/tool parse, arithmetic"
    )
    _server_args(sp)
    sp.add_argument(
        "--reference", help="reference tokens JSON (from --record on the reference configuration)"
    )
    sp.add_argument("--record", help="write this server's tokens as a reference JSON")
    sp.add_argument("--configuration", default="unknown")
    sp.add_argument("--max-tokens", type=int, default=32)
    sp.add_argument("--min-prefix", type=int, default=8, help="tokens every prompt must agree on")
    sp.add_argument("--min-mean-fraction", type=float, default=0.5)
    sp.add_argument("--harmony", choices=["auto", "required", "skip"], default="auto")
    sp.add_argument("--real-checkpoint", action="store_true", help="real weights: require exact arithmetic")
    sp.set_defaults(func=cmd_level2)

    sp = lv.add_parser("3", help="stress: sequential, concurrent, long context; zero errors, no restart")
    _server_args(sp)
    sp.add_argument("--sequential", type=int, default=100)
    sp.add_argument("--requests", type=int, default=40, help="requests in the concurrent phase")
    sp.add_argument("--concurrency", type=int, default=4)
    sp.add_argument("--long-tokens", type=int, default=4096, help="prompt tokens of the long-context request")
    sp.add_argument("--max-tokens", type=int, default=16)
    sp.add_argument("--server-pid", type=int)
    sp.add_argument("--engine-log")
    sp.set_defaults(func=cmd_level3)

    _bench_args(lv.add_parser("4", help="benchmark: same as `bench`"))

    sp = lv.add_parser("5", help="regression vs the stored baseline of the same hardware/configuration")
    sp.add_argument("--run", help="the run to check (default: latest of --hardware/--configuration)")
    sp.add_argument("--configuration")
    sp.add_argument("--baseline", help="compare against this run instead of the stored baseline")
    sp.add_argument("--max-drop", type=float, default=0.03, help="largest tolerated throughput drop (0.03)")
    sp.add_argument("--max-mem-growth-gb", type=float, default=1.0)
    sp.add_argument("--json-out")
    _store_args(sp)
    sp.set_defaults(func=cmd_level5)

    sp = lv.add_parser("6", help="matrix: configurations from a YAML file, each with levels 1, 1.5, 4")
    sp.add_argument("matrix", help="e.g. configs/matrix-spark.yaml")
    sp.add_argument("--only", action="append", help="run only this configuration (repeatable)")
    sp.add_argument("--work", help="server logs (default .work/matrix)")
    sp.add_argument("--json-out")
    sp.add_argument("--store")
    sp.set_defaults(func=cmd_level6)

    bl = sub.add_parser("baseline", help="level-5 baselines").add_subparsers(dest="what", required=True)
    sp = bl.add_parser("set", help="make RUN the baseline of its hardware and configuration")
    sp.add_argument("run")
    sp.add_argument("--store")
    sp.set_defaults(func=cmd_baseline_set)

    sp = sub.add_parser("report", help="docs/BENCHMARK_RESULTS.md and PNG plots from the run store")
    sp.add_argument("--store", help=f"default: <repo>/{DEFAULT_STORE}")
    sp.add_argument("--out", help="default: <repo>/docs/BENCHMARK_RESULTS.md")
    sp.add_argument("--img-dir", help="default: <out dir>/img/benchmarks")
    sp.add_argument("--anchors", help="default: <repo>/../shared/ANCHORS.md")
    sp.add_argument("--no-plots", action="store_true")
    sp.set_defaults(func=cmd_report)
