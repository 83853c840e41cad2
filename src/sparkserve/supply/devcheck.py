"""Where vllm and flashinfer are imported from, and whether that is the mounted dev tree.

The dev container runs this at every start (`sparkserve dev enter`) and refuses to go on when either
package would come from anywhere but its tree. It asks the import system (importlib.util.find_spec)
without importing the packages, so it takes no torch import and sees exactly what `import` would load.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from sparkserve.supply.editable import IMPORT_NAME


@dataclass(frozen=True)
class Origin:
    upstream: str
    module: str
    file: Path | None  # None: not importable
    tree: Path

    @property
    def ok(self) -> bool:
        return self.file is not None and self.file.resolve().is_relative_to(self.tree.resolve())

    def line(self) -> str:
        if self.file is None:
            return (f"{self.module}: NOT importable; it should come from the tree {self.tree} "
                    "(sparkserve dev install)")
        if self.ok:
            return f"{self.module}: {self.file} (the tree {self.tree})"
        return f"{self.module}: {self.file} is NOT in the tree {self.tree}"


def origin(module: str) -> Path | None:
    importlib.invalidate_caches()
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin)


def check(trees: dict[str, Path]) -> list[Origin]:
    return [Origin(name, IMPORT_NAME[name], origin(IMPORT_NAME[name]), tree) for name, tree in trees.items()]
