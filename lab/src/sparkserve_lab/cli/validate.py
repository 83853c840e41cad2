"""`validate`: a component against its reference on this GPU.

    sparkserve validate moe [--tokens 1,7,64] [--all-tactics]        FlashInfer's MoE vs the PyTorch reference
    sparkserve validate loader DIR [--formats A,B] [--rounds 2]      weight loaders: same weights, load times
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, path_arg, root
from sparkserve.progress import say
from sparkserve_lab.cli import moe
from sparkserve_lab.cli.common import DEFAULT_STORE


def cmd_validate_loader(a: argparse.Namespace) -> int:
    from sparkserve_lab import loadcheck
    from sparkserve_lab.moe import record
    from sparkserve_lab.runstore import Store, write_json

    formats = [f.strip() for f in a.formats.split(",") if f.strip()]
    loadcheck.check_args(Path(a.model), formats, a.rounds)
    rec = record.open_record(Store(path_arg(a, "store", DEFAULT_STORE)), root(), loadcheck.KIND,
                             "validate-loader", a.hardware, ["sparkserve", *sys.argv[1:]])
    try:
        loads = loadcheck.run(Path(a.model), formats, a.rounds,
                              Path(a.work) if a.work else rec.path / "engines", a.max_model_len)
    except BaseException as exc:  # the record says it failed, then the error goes on
        record.close_record(rec, False, {"error": str(exc)})
        raise
    verdict = loadcheck.compare(loads)
    write_json(rec.file("loadcheck.json"), {
        "model": a.model, "formats": formats, "rounds": a.rounds, "ok": verdict.ok,
        "problems": verdict.problems, "summary": verdict.summary,
        "loads": [{"load_format": x.load_format, "round": x.round, "weights_s": x.weights_s,
                   "engine_s": round(x.engine_s, 1), "page_cache_dropped": x.page_cache_dropped,
                   "digest": x.digest(), "tokens": x.tokens} for x in loads],
    })
    record.close_record(rec, verdict.ok, {"summary": verdict.summary})
    for p in verdict.problems:
        say(f"validate loader: {p}")
    for fmt in formats:
        s = verdict.summary.get(fmt, {})
        say(f"validate loader: {fmt}: weights loaded in {s.get('weights_s')} s (median "
            f"{s.get('weights_s_median')} s)")
    say(f"validate loader: {'PASS' if verdict.ok else 'FAIL'}: {verdict.summary.get('parameters')} "
        f"parameters, digest {str(verdict.summary.get('digest'))[:12]} -> {rec.path}")
    return OK if verdict.ok else FAILED


def register(sub: Any) -> None:
    val = sub.add_parser("validate", help="a component against its reference on this GPU") \
        .add_subparsers(dest="what", required=True)
    moe.register_validate(val)
    sp = val.add_parser("loader", help="weight loaders on one checkpoint: identical weights and outputs, "
                                       "load times (one engine per format and round, interleaved)")
    sp.add_argument("model", help="a checkpoint folder with safetensors files")
    sp.add_argument("--formats", default="safetensors,fastsafetensors",
                    help="vLLM load formats; the first is the reference "
                         "(default: safetensors,fastsafetensors)")
    sp.add_argument("--rounds", type=int, default=2, help="A B A B ... rounds (default 2)")
    sp.add_argument("--max-model-len", type=int, default=4096)
    sp.add_argument("--work", help="engine logs (default: the record's engines/ folder)")
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.add_argument("--hardware", help="lab/results/<hardware>/ label (default: the detected GPU)")
    sp.set_defaults(func=cmd_validate_loader)
