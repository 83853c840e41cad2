"""What a failing CI phase printed, again, at the end of scripts/test.sh's output: the lines that look like
errors, then the phase's last lines. A CI log shown only in part keeps its end, and a phase's own failure
(a molecule task, a build step) is otherwise far above the summary.

    PYTHONPATH=src python3 -m sparkserve_lab.testing.phaselog LOG [--errors N] [--tail N]

Standard library only: it runs for any phase, the first ones before the project's venv exists.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# Words with which the tools of the phases say that something failed.
ERROR = re.compile(
    r"\b(FAIL(ED)?|ERROR|Error|error:|fatal:|Traceback|No space left|exit code [1-9]|exit [1-9])")
# Lines that only repeat a wait (ansible's retries) say nothing about the cause.
NOISE = re.compile(r"FAILED - RETRYING")
WIDTH = 240


def digest(text: str, errors: int, tail: int) -> list[str]:
    lines = text.splitlines()
    hits = [f"{n + 1}: {line}" for n, line in enumerate(lines)
            if ERROR.search(line) and not NOISE.search(line)]
    out = [f"lines that look like errors ({len(hits)}, the last {min(errors, len(hits))}):"]
    out += ["  " + line for line in hits[-errors:]] if errors else []
    out.append(f"the last {min(tail, len(lines))} of {len(lines)} lines:")
    out += ["  | " + line for line in lines[-tail:]] if tail else []
    return [line if len(line) <= WIDTH else line[: WIDTH - 3] + "..." for line in out]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="phaselog", description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--errors", type=int, default=15)
    ap.add_argument("--tail", type=int, default=40)
    a = ap.parse_args(argv)
    text = a.log.read_text(errors="replace") if a.log.exists() else ""
    print("\n".join(digest(text, a.errors, a.tail)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
