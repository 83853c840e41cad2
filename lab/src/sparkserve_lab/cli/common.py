"""What the lab's verbs share besides the product's CLI helpers: where the run store and the rules live."""

from __future__ import annotations

import argparse

DEFAULT_STORE = "lab/results"
DEFAULT_KERNEL_RULES = "lab/configs/engine-kernels.toml"


def store_args(sp: argparse.ArgumentParser, rules: bool = True) -> None:
    sp.add_argument("--store", help=f"run store (default: <repo>/{DEFAULT_STORE})")
    sp.add_argument(
        "--hardware", help="lab/results/<hardware>/ label (default: detected GPU, else cpu-<arch>-<n>c)"
    )
    if rules:
        sp.add_argument("--rules", help=f"kernel rules (default: <repo>/{DEFAULT_KERNEL_RULES})")
