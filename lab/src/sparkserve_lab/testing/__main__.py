"""Test fixtures as commands (not part of the `sparkserve` CLI, not in the runtime image).

    python -m sparkserve_lab.testing tiny-model --out DIR      tiny random Llama for CPU serving tests
    python -m sparkserve_lab.testing gptoss-dummy --out DIR    config-only gpt-oss checkpoint + its tokenizer
                                         (--random-weights-seed N: plus random safetensors weights)
    python -m sparkserve_lab.testing eagle3-dummy --out DIR    config-only gpt-oss-120b Eagle3 draft
    python -m sparkserve_lab.testing diverge-reference IN OUT  a level-2 reference that must fail
    python -m sparkserve_lab.testing scale-throughput FILE F   a run whose throughput level 5 must reject
    python -m sparkserve_lab.testing offline-check             inside a serving container: offline for real
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say


def cmd_tiny_model(a: argparse.Namespace) -> int:
    from sparkserve_lab.testing import tinymodel

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


def cmd_gptoss_dummy(a: argparse.Namespace) -> int:
    from sparkserve_lab.testing import gptoss_dummy

    out = gptoss_dummy.make(
        Path(a.out),
        a.size,
        Path(a.tokenizer_json) if a.tokenizer_json else None,
        Path(a.save_tokenizer) if a.save_tokenizer else None,
        a.random_weights_seed,
        a.weights_device,
    )
    print(out)
    return 0




def cmd_eagle3_dummy(a: argparse.Namespace) -> int:
    from sparkserve_lab.testing import eagle3_dummy

    print(eagle3_dummy.make(Path(a.out), Path(a.from_config) if a.from_config else None))
    return 0


def cmd_diverge_reference(a: argparse.Namespace) -> int:
    from sparkserve_lab.testing import negative

    n = negative.diverge_reference(Path(a.reference), Path(a.out), a.after)
    print(f"{a.out}: {n} prompt(s) diverge after {a.after} tokens")
    return 0


def cmd_scale_throughput(a: argparse.Namespace) -> int:
    from sparkserve_lab.testing import negative

    n = negative.scale_throughput(Path(a.bench_json), a.factor)
    print(f"{a.bench_json}: {n} throughput(s) scaled by {a.factor:g}")
    return 0


def cmd_offline_check(a: argparse.Namespace) -> int:
    from sparkserve_lab.testing import offline

    print(offline.check())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sparkserve_lab.testing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
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
    sp.add_argument("--random-weights-seed", type=int, metavar="SEED",
                    help="also write random weights as safetensors (MXFP4 experts; 120b/20b; ~13 GB for 20b)")
    sp.add_argument("--weights-device", default="cpu", help="where to draw them (cuda is faster)")
    sp.set_defaults(func=cmd_gptoss_dummy)

    sp = sub.add_parser("eagle3-dummy",
                        help="config-only Eagle3 draft of gpt-oss-120b's shape (LOAD_FORMAT=dummy)")
    sp.add_argument("--out", required=True, help="directory to write")
    sp.add_argument("--from-config", help="a real draft's config.json to copy the shape from")
    sp.set_defaults(func=cmd_eagle3_dummy)

    sp = sub.add_parser("diverge-reference", help="a level-2 reference that diverges after N tokens")
    sp.add_argument("reference")
    sp.add_argument("out")
    sp.add_argument("--after", type=int, default=3)
    sp.set_defaults(func=cmd_diverge_reference)

    sp = sub.add_parser("scale-throughput", help="scale a llama-benchy result's throughputs in place")
    sp.add_argument("bench_json")
    sp.add_argument("factor", type=float)
    sp.set_defaults(func=cmd_scale_throughput)

    sp = sub.add_parser("offline-check", help="in a serving container: HF_HUB_OFFLINE=1 and no network")
    sp.set_defaults(func=cmd_offline_check)
    args = ap.parse_args(argv)
    try:
        return int(args.func(args))
    except SparkserveError as exc:
        say(f"sparkserve_lab.testing: error: {exc}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
