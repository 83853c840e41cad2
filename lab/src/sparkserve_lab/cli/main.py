"""sparkserve-lab: what proves and measures sparkserve (test levels 1.5 and 3-6, a server of a profile, A/B
comparisons, decode traces, speculative decoding, MoE tactics, proofs, upstream tests, hunk mutation, the
run store and its reports). The product's own verbs (doctor, profile check, the deploy gate, patches) are
`sparkserve`'s.

Exit codes: 0 done; 1 a check, level or comparison failed; 2 the command line is wrong;
3 the verb could not do its job (the message says why); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from sparkserve.cli import common
from sparkserve_lab import __version__
from sparkserve_lab.cli import ab, levels, metrics, moe, mutate, runs, serve, speculative, trace, validate

# Verb groups in the order `--help` lists them: the test levels, a server as the lab serves it, A/B
# comparisons, decode traces, speculative decoding, MoE tactics and components on a GPU host, hunk
# mutation, the run store, the metrics profile's dashboards.
GROUPS = (levels, serve, ab, trace, speculative, moe, validate, mutate, runs, metrics)


def build_parser() -> argparse.ArgumentParser:
    return common.build_parser(GROUPS, "sparkserve-lab", __doc__, __version__)


def main(argv: list[str] | None = None) -> int:
    return common.run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
