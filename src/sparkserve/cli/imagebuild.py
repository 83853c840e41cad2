"""The verbs the image build runs before the runtime stage, alone: `patches` and `jit`.

    python -m sparkserve.cli.imagebuild patches apply --site SITE
    python -m sparkserve.cli.imagebuild jit prewarm --modules docker/jit-modules.toml ...

The Dockerfile's `patched` and `jit` stages copy only the modules these import (tests/unit/
test_image_layers.py keeps the list complete), so editing the serving code, the gate or another verb
does not re-apply the patches or re-run the JIT prewarm; the runtime stage copies the whole package.
"""

from __future__ import annotations

import sys

from sparkserve.cli import common, jit, patches

GROUPS = (patches, jit)


def main(argv: list[str] | None = None) -> int:
    return common.run(common.build_parser(GROUPS, "python -m sparkserve.cli.imagebuild", __doc__), argv)


if __name__ == "__main__":
    sys.exit(main())
