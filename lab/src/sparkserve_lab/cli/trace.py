"""`trace`: where a served engine's time goes, from vLLM's torch profiler.

    sparkserve-lab trace decode --base-url URL --trace-dir DIR --configuration C [--batch 1,32]
        a running server's decode steps as served (vLLM's torch profiler endpoints): time per kernel
        class, kernels, GPU idle and host time per step, into lab/results/<hardware>/ (kind decode-profile)
    sparkserve-lab trace prefill --base-url URL --trace-dir DIR --configuration C [--concurrency 32,64]
        the same server's prefill chunks under load (concurrent requests of --prompt-tokens token ids): time
        per kernel class and per token of a full chunk, into lab/results/<hardware>/ (kind prefill-profile)
    sparkserve-lab trace summarize TRACE [--batch 1]
        the same breakdown of a stored torch profiler trace, printed (no server, no record)
    sparkserve-lab trace reclassify RECORD
        a decode-profile record's breakdown again from its raw traces, with the current kernel classes
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, int_list_arg, path_arg, root
from sparkserve.errors import SparkserveError
from sparkserve.progress import say
from sparkserve_lab import gzfile
from sparkserve_lab.cli.common import DEFAULT_STORE

DEFAULT_CLASSES = "lab/configs/decode-kernel-classes.toml"


def _expect_graphs(a: argparse.Namespace) -> bool:
    if a.cuda_graphs != "profile":
        return bool(a.cuda_graphs == "on")
    if not a.profile:
        return True  # every shipped profile serves with CUDA graphs; stock vLLM does too
    from sparkserve.serving import profiles

    res = profiles.resolve(a.profile, root())
    return bool(res.profile.cuda_graphs)


def _classes(class_us: dict[str, float], beside: dict[str, float], fmt: str) -> None:
    """One line per kernel class with time: its us, and `beside`'s value for it in `fmt`."""
    from sparkserve_lab.trace.classify import CLASSES

    for c in CLASSES:
        if class_us[c]:
            say(f"  {c:<20} {class_us[c]:9.1f} us  {fmt.format(beside[c])}")


def _print(summary: dict[str, Any]) -> None:
    say(f"batch {summary['batch']}: {summary['decode_steps']} decode steps, period "
        f"{summary['step_period_us']['median']} us (median) = {summary['tokens_per_s_per_user_from_period']} "
        f"tok/s per user, {summary['kernels_per_step']} kernels, GPU busy {summary['gpu_busy_us']} us, idle "
        f"{summary['gpu_idle_total_us']} us, host execute_model {summary['host_execute_model_us']} us, "
        f"graph launches {summary['graph_launches_per_step']}")
    _classes(summary["class_us"], summary["class_kernels"], "{:6.1f} kernels")


def cmd_decode(a: argparse.Namespace) -> int:
    from sparkserve_lab.moe import record as rec_mod
    from sparkserve_lab.runstore import Store, write_json
    from sparkserve_lab.trace import capture, classify, record, steps, trace

    rules = classify.load(path_arg(a, "classes", DEFAULT_CLASSES))
    batches: list[int] = a.batch
    expect = _expect_graphs(a)
    client, model, trace_dir = _ready(a)
    say(f"profile decode: warm-up ({max(batches)} requests of {a.tokens} tokens)")
    capture.send(client, model, capture.Load(max(batches), a.tokens))
    captured: list[tuple[int, Path, list[steps.Step]]] = []
    for b in batches:
        say(f"profile decode: batch {b}, {a.tokens} tokens each")
        path = capture.profile_once(client, model, capture.Load(b, a.tokens), trace_dir)
        st = steps.split(trace.load(path), rules)
        capture.require_graphs([s for s in st if s.is_decode and s.gen_reqs == b], expect)
        captured.append((b, path, st))
    rec = rec_mod.open_record(Store(path_arg(a, "store", DEFAULT_STORE)), root(), record.KIND,
                              f"decode-profile-{a.configuration}", a.hardware,
                              ["sparkserve-lab", *sys.argv[1:]])
    out: dict[str, Any] = {"configuration": a.configuration, "profile": a.profile, "model": model,
                           "tokens_per_request": a.tokens, "cuda_graphs_expected": expect,
                           "load": capture.Load(max(batches), a.tokens).to_dict(),
                           "classes_file": rules.source, "classes_sha256": rules.sha256, "batches": {}}
    for b, path, st in captured:
        s = steps.summarize(st, b)
        _print(s)
        s["trace"] = record.keep_trace(path, rec.path, b)
        out["batches"][str(b)] = s
        write_json(rec.file(f"kernels-b{b}.json"), steps.kernel_table(st, b))
        mid = steps.median_step(st, b)
        write_json(rec.file(f"step-b{b}.json"), steps.excerpt(mid) if mid else [])
    gzfile.compact(rec.path)
    write_json(rec.file(record.SUMMARY), out)
    _close(rec, a)
    return OK


def _ready(a: argparse.Namespace) -> tuple[Any, str, Path]:
    """The client of a ready server, its model and the folder its profiler writes to."""
    from sparkserve.gate.common import Client
    from sparkserve_lab.trace import capture

    client = Client(a.base_url)
    model = capture.require_ready(client)
    trace_dir = Path(a.trace_dir)
    if not trace_dir.is_dir():
        raise SparkserveError(f"--trace-dir {trace_dir}: not a folder (the server's torch_profiler_dir)")
    return client, model, trace_dir


def _close(rec: Any, a: argparse.Namespace) -> None:
    """The record closed with what served it."""
    from sparkserve_lab import metadata
    from sparkserve_lab.moe import record as rec_mod

    server: dict[str, Any] = {"base_url": a.base_url}
    if a.server_pid:
        server["process"] = metadata.server_process(a.server_pid)
    server.update({"info": metadata.server_info(a.base_url)})
    rec_mod.close_record(rec, True, {"configuration": a.configuration, "server": server,
                                     "random_weights": a.random_weights})
    print(rec.path)


def cmd_prefill(a: argparse.Namespace) -> int:
    import time

    from sparkserve_lab.moe import record as rec_mod
    from sparkserve_lab.runstore import Store, write_json
    from sparkserve_lab.trace import capture, classify, prefill, record, steps, trace

    rules = classify.load(path_arg(a, "classes", DEFAULT_CLASSES))
    client, model, trace_dir = _ready(a)
    salt = int(time.time())
    say(f"profile prefill: warm-up (2 requests of {a.prompt_tokens} prompt tokens)")
    capture.send(client, model, capture.PromptLoad(2, a.tokens, a.prompt_tokens, salt))
    captured: list[tuple[int, Path, list[steps.Step]]] = []
    for c in a.concurrency:
        say(f"profile prefill: {c} requests of {a.prompt_tokens} prompt tokens, {a.tokens} decoded each")
        load = capture.PromptLoad(c, a.tokens, a.prompt_tokens, salt + c)
        path = capture.profile_once(client, model, load, trace_dir)
        captured.append((c, path, steps.split(trace.load(path), rules)))
    rec = rec_mod.open_record(Store(path_arg(a, "store", DEFAULT_STORE)), root(), record.PREFILL_KIND,
                              f"prefill-profile-{a.configuration}", a.hardware,
                              ["sparkserve-lab", *sys.argv[1:]])
    load = capture.PromptLoad(max(a.concurrency), a.tokens, a.prompt_tokens)
    out: dict[str, Any] = {"configuration": a.configuration, "profile": a.profile, "model": model,
                           "load": load.to_dict(), "classes_file": rules.source,
                           "classes_sha256": rules.sha256, "concurrency": {}}
    for c, path, st in captured:
        s = prefill.summarize(st, c)
        _print_prefill(s)
        s["trace"] = record.keep_trace(path, rec.path, c, tag="c")
        out["concurrency"][str(c)] = s
        write_json(rec.file(f"kernels-c{c}.json"), prefill.kernel_table(st))
        write_json(rec.file(f"step-c{c}.json"), steps.excerpt(prefill.median_chunk(st)))
    gzfile.compact(rec.path)
    write_json(rec.file(record.PREFILL_SUMMARY), out)
    _close(rec, a)
    return OK


def _print_prefill(s: dict[str, Any]) -> None:
    say(f"c={s['concurrency']}: {s['full_chunks']} full chunks of {s['chunk_tokens']} tokens "
        f"({s['chunk_decode_tokens']} of them decode) of {s['prefill_steps']} prefill steps, period "
        f"{s['step_period_us']} us = {s['tokens_per_s_from_period']} tok/s, {s['kernels_per_step']} kernels, "
        f"GPU busy {s['gpu_busy_us']} us, host execute_model {s['host_execute_model_us']} us")
    _classes(s["class_us"], s["class_ns_per_token"], "{:8.1f} ns a token")


def cmd_reclassify(a: argparse.Namespace) -> int:
    import time

    from sparkserve_lab.runstore import Store, read_json, write_json
    from sparkserve_lab.trace import classify, record, steps, trace

    run = Store(path_arg(a, "store", DEFAULT_STORE)).get(a.record)
    rules = classify.load(path_arg(a, "classes", DEFAULT_CLASSES))
    data = dict(read_json(run.file(record.SUMMARY)))
    before: dict[str, Any] = {}
    previous: dict[str, Any] = {"classes_sha256": data.get("classes_sha256"), "batches": before}
    for b, old in data["batches"].items():
        raw = (old.get("trace") or {}).get("raw_trace")
        before[b] = {"class_us": old.get("class_us")}
        if raw and run.file(raw).exists():
            st = steps.split(trace.load(run.file(raw)), rules)
            new = steps.summarize(st, int(b))
            table = steps.kernel_table(st, int(b))
            mid = steps.median_step(st, int(b))
            step = steps.excerpt(mid) if mid else []
        elif run.file(f"step-b{b}.json").exists() or run.file(f"step-b{b}.json.gz").exists():
            # the raw trace was left out for its size: the kept step and kernel table carry the change
            new, table, step = steps.reclassify_kept(old, read_json(run.file(f"kernels-b{b}.json")),
                                                     read_json(run.file(f"step-b{b}.json")), rules)
            before[b]["from"] = "the kept median step and kernel table (no raw trace)"
        else:
            raise SparkserveError(f"{run.run_id}: batch {b} has no raw trace or kept step to classify again")
        new["trace"] = old["trace"]
        data["batches"][b] = new
        write_json(run.file(f"kernels-b{b}.json"), table)
        write_json(run.file(f"step-b{b}.json"), step)
        _print(new)
    gzfile.compact(run.path)
    data["classes_sha256"] = rules.sha256
    data.setdefault("reclassified", []).append(
        {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "before": previous})
    write_json(run.file(record.SUMMARY), data)
    print(run.path)
    return OK


def cmd_summarize(a: argparse.Namespace) -> int:
    from sparkserve_lab.trace import classify, steps, trace

    rules = classify.load(path_arg(a, "classes", DEFAULT_CLASSES))
    st = steps.split(trace.load(Path(a.trace)), rules)
    for b in a.batch:
        s = steps.summarize(st, b)
        if a.json_output:
            print(json.dumps(s, indent=2))
        else:
            _print(s)
    return OK if st else FAILED


def register(sub: Any) -> None:
    p = sub.add_parser("trace", help="where a served engine's decode step and prefill chunk go (torch "
                                     "profiler)") \
        .add_subparsers(dest="what", required=True)
    sp = p.add_parser("decode",
                      help="profile a running server's decode steps at batch 1 and 32 into the store")
    _server_args(sp)
    sp.add_argument("--cuda-graphs", choices=("profile", "on", "off"), default="profile",
                    help="what the steps must show: a capture that contradicts it is refused (default: the "
                         "profile's setting, on without one)")
    sp.add_argument("--batch", type=int_list_arg(), default="1,32",
                    help="concurrent requests per capture (default 1,32)")
    sp.add_argument("--tokens", type=int, default=64, help="tokens each request decodes (default 64)")
    _record_args(sp)
    sp.set_defaults(func=cmd_decode)
    sp = p.add_parser("prefill", help="profile a running server's prefill chunks under load into the store")
    _server_args(sp)
    sp.add_argument("--concurrency", type=int_list_arg(), default="32,64",
                    help="concurrent requests per capture (default 32,64)")
    sp.add_argument("--prompt-tokens", type=int, default=2048, help="prompt tokens a request (default 2048)")
    sp.add_argument("--tokens", type=int, default=4, help="tokens each request decodes (default 4)")
    _record_args(sp)
    sp.set_defaults(func=cmd_prefill)
    sp = p.add_parser("summarize", help="the breakdown of a stored torch profiler trace (printed)")
    sp.add_argument("trace", help="a torch profiler trace (.json or .json.gz)")
    sp.add_argument("--batch", type=int_list_arg(), default="1",
                    help="decode batch sizes to summarize (default 1)")
    sp.add_argument("--classes", help=f"kernel classes (default: <repo>/{DEFAULT_CLASSES})")
    sp.set_defaults(func=cmd_summarize, json_data=True)
    sp = p.add_parser("reclassify", help="a decode-profile record's breakdown again from its raw traces")
    sp.add_argument("record", help="the record (path, <hardware>/<id> or id prefix)")
    sp.add_argument("--classes", help=f"kernel classes (default: <repo>/{DEFAULT_CLASSES})")
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.set_defaults(func=cmd_reclassify)


def _server_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--base-url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    sp.add_argument("--trace-dir", required=True,
                    help="the server's torch_profiler_dir (vLLM --profiler-config), readable here")
    sp.add_argument("--configuration", required=True,
                    help="what the server runs (a profile name, vllm-defaults)")
    sp.add_argument("--profile", help="the serving profile it runs (its CUDA_GRAPHS decides --cuda-graphs)")


def _record_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--server-pid", type=int, help="the server's pid: its command line and environment")
    sp.add_argument("--random-weights", action="store_true", help="the server has random weights (recorded)")
    sp.add_argument("--classes", help=f"kernel classes (default: <repo>/{DEFAULT_CLASSES})")
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.add_argument("--hardware", help="lab/results/<hardware>/ label (default: the detected GPU)")
