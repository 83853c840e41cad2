"""Verbs of FlashInfer's CUTLASS fused MoE on a GPU host: `moe sweep`, `moe install`, `moe tactics` and
`validate moe`.

    sparkserve validate moe [--tokens 1,7,64] [--all-tactics]      the kernel vs the PyTorch reference
    sparkserve moe sweep [--buckets all|quick|1,8,64] [--install]   time + check every tactic, write a table
    sparkserve moe install RECORD|FILE [--to DIR]                  check a table here and install it
    sparkserve moe tactics [--path P]                              what the tactic indices mean
Both GPU verbs take --dry-run [--path P]: the CPU rehearsal (everything but the kernel launch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sparkserve.cli.common import FAILED, OK, int_list_arg, path_arg, root
from sparkserve_lab.cli.common import DEFAULT_STORE

DRY_RUN_STORE = ".work/moe-dry-run/results"


def _shape(a: argparse.Namespace) -> Any:
    from sparkserve.serving.moe import shape

    return shape.for_model(a.model)


def _need_torch() -> None:
    import importlib.util

    from sparkserve.errors import SparkserveError

    if importlib.util.find_spec("torch") is None:
        raise SparkserveError("validate moe and moe sweep need torch (and, on a GPU, flashinfer): run "
                              "them with the Python of the pinned stack (docs/GPU.md), or a CPU torch for "
                              "--dry-run")


def _target(a: argparse.Namespace) -> Any:
    from sparkserve.serving.moe import tactics
    from sparkserve_lab.moe.commands import Target

    if a.dry_run and a.path not in tactics.PATHS:
        from sparkserve.errors import SparkserveError

        raise SparkserveError(f"--path {a.path!r}: one of {', '.join(tactics.PATHS)}")
    return Target(_shape(a), a.activation, a.device, a.path if a.dry_run else None, a.dry_run_experts)


def _output(a: argparse.Namespace) -> Any:
    from sparkserve_lab.moe.commands import Output

    store = Path(a.store) if a.store else root() / (DRY_RUN_STORE if a.dry_run else DEFAULT_STORE)
    hardware = a.hardware or (f"dry-run-{a.path}" if a.dry_run else None)
    return Output(store, root(), hardware, ("sparkserve", *sys.argv[1:]))


def cmd_validate_moe(a: argparse.Namespace) -> int:
    _need_torch()
    from sparkserve_lab.moe import commands, validate

    tokens = tuple(sorted(set(a.tokens))) if a.tokens else validate.DEFAULT_TOKENS
    ok, _ = commands.run_validate(_target(a), tokens, a.seed, a.all_tactics, a.tolerance, _output(a))
    return OK if ok else FAILED


def cmd_moe_sweep(a: argparse.Namespace) -> int:
    _need_torch()
    from sparkserve_lab.moe import buckets, commands, install, sweep

    cfg = sweep.Config(buckets.parse(a.buckets, a.max_tokens), a.seed, a.replays, a.warmup, a.repeats,
                       a.tolerance, a.every_index)
    install_to = None
    if a.install or a.install_to:
        install_to = Path(a.install_to) if a.install_to else install.default_dir()
    ok, _ = commands.run_sweep(_target(a), cfg, _output(a), install_to)
    return OK if ok else FAILED


def cmd_moe_install(a: argparse.Namespace) -> int:
    from sparkserve_lab.moe import commands, install

    cc = a.compute_capability or commands.gpu_compute_capability()
    dest = commands.install_table(a.table, path_arg(a, "store", DEFAULT_STORE),
                                  Path(a.to) if a.to else install.default_dir(), _shape(a), cc)
    print(dest)
    return OK


def cmd_moe_tactics(a: argparse.Namespace) -> int:
    from sparkserve.serving.moe import tactics

    for listing in tactics.known_lists(a.path):
        n1, n2 = listing.counts
        print(f"{listing.path} ({listing.variant}): {n1} GEMM1 + {n2} GEMM2 tactics; -1 = #0 / #{n1}")
        for t in listing.all():
            print(f"  #{t.index:<4} gemm{t.gemm}  {t.label()}")
    return OK


def _gpu_args(sp: argparse.ArgumentParser) -> None:
    from sparkserve.serving.moe import shape, tactics

    sp.add_argument("--model", default=shape.GPT_OSS_120B.model,
                    help="whose MoE shapes (a known id or a folder with a gpt-oss config.json)")
    sp.add_argument("--activation", choices=["mxfp8", "bf16"],
                    help="the activation path (default: what the GPU runs: mxfp8 on SM12x, bf16 on SM90)")
    sp.add_argument("--device", type=int, default=0, help="CUDA device index")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--tolerance", type=float, help="relative L2 error allowed (default: per activation)")
    sp.add_argument("--dry-run", action="store_true",
                    help="rehearse on the CPU: everything but the kernel launch (synthetic timings)")
    sp.add_argument("--path", default=tactics.SM90_BF16_MXFP4, help="the path a dry run rehearses")
    sp.add_argument("--dry-run-experts", type=int, default=8,
                    help="experts of a dry run (the CPU reference is slow; the GPU uses the model's)")
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE}; dry run: {DRY_RUN_STORE})")
    sp.add_argument("--hardware", help="lab/results/<hardware>/ label (default: the detected GPU)")


def register_validate(val: Any) -> None:
    """`validate moe` (the `validate` group itself: cli/validate.py)."""
    sp = val.add_parser("moe", help="FlashInfer's CUTLASS MXFP4 fused MoE vs the PyTorch reference")
    _gpu_args(sp)
    sp.add_argument("--tokens", type=int_list_arg(),
                    help="token counts >= 1, comma-separated (default: 1,7,64,333,2048)")
    sp.add_argument("--all-tactics", action="store_true",
                    help="also every GEMM1 and every GEMM2 tactic FlashInfer's autotuner could pick")
    sp.set_defaults(func=cmd_validate_moe)


def register(sub: Any) -> None:
    moe = sub.add_parser("moe", help="FlashInfer's CUTLASS fused MoE: tactic sweep and table") \
        .add_subparsers(dest="what", required=True)
    sp = moe.add_parser("sweep", help="time and check every tactic per token bucket; write a tactic table")
    _gpu_args(sp)
    sp.add_argument("--buckets", default="all",
                    help="all (FlashInfer's buckets 1..8192), quick (1,8,64,512) or a comma list")
    sp.add_argument("--max-tokens", type=int, default=8192, help="the largest bucket of `all`")
    sp.add_argument("--replays", type=int, default=20, help="graph replays per timed batch")
    sp.add_argument("--warmup", type=int, default=3)
    sp.add_argument("--repeats", type=int, default=3, help="timed batches (the median is kept)")
    sp.add_argument("--every-index", action="store_true",
                    help="also the tactic indices FlashInfer's autotuner skips for this shape (recorded as "
                         "errors when they raise)")
    sp.add_argument("--install", action="store_true",
                    help="install the table for MOE_TACTICS=table "
                         "($SPARKSERVE_STATE_DIR or /var/lib/sparkserve)")
    sp.add_argument("--install-to", help="install the table into this folder instead")
    sp.set_defaults(func=cmd_moe_sweep)

    sp = moe.add_parser("install", help="check a sweep's table against this machine and install it")
    sp.add_argument("table", help="a moe-tactics.json, or a sweep record (path, <hardware>/<id> or id)")
    sp.add_argument("--to", help="folder (default: $SPARKSERVE_STATE_DIR or /var/lib/sparkserve)")
    sp.add_argument("--model", default="openai/gpt-oss-120b", help="the served model (its MoE shapes)")
    sp.add_argument("--compute-capability", help="check against this (default: GPU 0, if any)")
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.set_defaults(func=cmd_moe_install)

    sp = moe.add_parser("tactics", help="the tactic lists sparkserve knows: index -> CUTLASS kernel")
    sp.add_argument("--path", default="sm120-mxfp8-mxfp4", help="sm120-mxfp8-mxfp4 or sm90-bf16-mxfp4")
    sp.set_defaults(func=cmd_moe_tactics)
