"""sparkserve: pinned, patched vLLM for openai/gpt-oss-120b on DGX Spark.

Exit codes: 0 done; 1 a check, level or comparison failed; 2 the command line is wrong;
3 the verb could not do its job (the message says why); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from sparkserve.cli import (
    ab,
    common,
    dev,
    doctor,
    jit,
    levels,
    moe,
    patches,
    profile,
    runs,
    speculative,
    supply,
    validate,
)

# Verb groups in the order `--help` lists them: the host check, supply chain, patch series, dev trees,
# image build, the test levels, A/B comparisons, step profiles, speculative decoding and kernels on a GPU
# host, the run store.
GROUPS = (doctor, supply, patches, dev, jit, levels, ab, profile, speculative, moe, validate, runs)


def build_parser() -> argparse.ArgumentParser:
    return common.build_parser(GROUPS, "sparkserve", __doc__)


def main(argv: list[str] | None = None) -> int:
    return common.run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
