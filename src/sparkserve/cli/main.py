"""sparkserve: pinned, patched vLLM for openai/gpt-oss-120b on DGX Spark. The lab that proves and
measures it has its own command, `sparkserve-lab` (lab/).

Exit codes: 0 done; 1 a check, level or comparison failed; 2 the command line is wrong;
3 the verb could not do its job (the message says why); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from sparkserve.cli import common, dev, doctor, jit, levels, metrics, patches, profile, supply

# Verb groups in the order `--help` lists them: what a Spark owner runs (the host check, a profile check,
# the deploy gate, the metrics profile's check), the patch series and the pinned supply chain, the dev
# trees, and last the image
# build's own steps. What proves and measures all of it is the lab's command, `sparkserve-lab`.
GROUPS = (doctor, profile, levels, metrics, patches, supply, dev, jit)


def build_parser() -> argparse.ArgumentParser:
    return common.build_parser(GROUPS, "sparkserve", __doc__)


def main(argv: list[str] | None = None) -> int:
    return common.run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
