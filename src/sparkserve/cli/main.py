"""sparkserve: pinned, patched vLLM for openai/gpt-oss-120b on DGX Spark.

Exit codes: 0 done; 1 a check, level or comparison failed; 2 the command line is wrong;
3 the verb could not do its job (the message says why); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from sparkserve import __version__
from sparkserve.cli import ab, common, dev, doctor, jit, levels, moe, patches, runs, supply, validate
from sparkserve.errors import SparkserveError
from sparkserve.progress import say

# Verb groups in the order `--help` lists them: the host check, supply chain, patch series, dev trees,
# image build, the test levels, A/B comparisons, kernels on a GPU host, the run store.
GROUPS = (doctor, supply, patches, dev, jit, levels, ab, moe, validate, runs)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sparkserve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--version", action="version", version=f"sparkserve {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SparkserveError as exc:
        say(f"sparkserve: error: {exc}")
        return common.ERROR
    except KeyboardInterrupt:
        say("sparkserve: interrupted")
        return common.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
