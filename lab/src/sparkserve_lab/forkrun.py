"""Run pytest many times on one interpreter without paying the heavy imports each time: the third-party
modules the tests load (torch, transformers, FlashInfer: most of a vLLM import's half minute on a CPU)
are imported once in this process, and every run is a forked child that imports the patched packages
afresh from disk, with a bytecode cache of its own (a reverted file of the same size and mtime second is
compiled from its source, never taken from a stale .pyc).

What the parent imports is what a first child loaded, minus everything under the `fresh` roots (the
packages whose files change between runs) and the tests; the parent then checks that none of those
came in with a third-party module, since a module imported before the fork would be the same in every
child."""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.progress import say


def _under(file: str | None, roots: Sequence[Path]) -> bool:
    if not file:
        return False
    path = os.path.realpath(file)
    return any(path == str(r) or path.startswith(str(r) + os.sep) for r in roots)


def loaded_outside(roots: Sequence[Path]) -> list[str]:
    """Modules of this process whose file is not under `roots` (builtins and namespace packages too),
    in the order they were first imported."""
    out = []
    for name, mod in list(sys.modules.items()):
        if name == "__main__" or mod is None:
            continue
        if not _under(getattr(mod, "__file__", None), roots):
            out.append(name)
    return out


def loaded_under(roots: Sequence[Path]) -> list[str]:
    return [n for n, m in list(sys.modules.items()) if m is not None and _under(getattr(m, "__file__", None),
                                                                                 roots)]


class ForkedPytest:
    """`pytest ARGS` in a forked child of this process, run in `cwd`; `fresh` are the folders whose
    modules every child imports itself."""

    def __init__(self, args: Sequence[str], cwd: Path, fresh: Sequence[Path]) -> None:
        self.args = list(args)
        self.cwd = cwd
        self.fresh = [Path(os.path.realpath(p)) for p in fresh]
        self.preloaded: list[str] = []

    def _child(self, report: int | None) -> int:
        with tempfile.TemporaryDirectory(prefix="sparkserve-fork-pyc-") as pyc:
            sys.pycache_prefix = pyc
            os.chdir(self.cwd)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            rc = int(pytest.main(list(self.args)))
            if report is not None:
                names = [n for n in loaded_outside([*self.fresh, Path(os.path.realpath(self.cwd))])
                         if not any(n == top or n.startswith(top + ".") for top in self._fresh_tops())]
                with os.fdopen(report, "w") as f:
                    json.dump(names, f)
        return rc

    def _fresh_tops(self) -> set[str]:
        return {p.name for p in self.fresh}

    def _fork(self, report: bool = False) -> tuple[int, float, str]:
        """(exit code, seconds, what the child reported: the names of the modules it loaded)."""
        t0 = time.monotonic()
        sys.stdout.flush()
        sys.stderr.flush()
        read, write = os.pipe() if report else (-1, -1)
        pid = os.fork()
        if pid == 0:
            rc = 70
            try:
                if report:
                    os.close(read)
                rc = self._child(write if report else None)
            except BaseException:
                rc = 70
            finally:
                os._exit(rc)
        text = ""
        if report:  # read before waiting: the child blocks on a full pipe until it is read
            os.close(write)
            with os.fdopen(read) as f:
                text = f.read()
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), time.monotonic() - t0, text

    def first(self) -> tuple[int, float]:
        """The first run; the third-party modules it loaded are then imported here, for every later run."""
        rc, dt, text = self._fork(report=True)
        if rc != 0:
            return rc, dt
        names = json.loads(text) if text else []
        before = set(sys.modules)
        for name in names:
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception:
                continue
        self.preloaded = sorted(set(sys.modules) - before)
        leaked = loaded_under(self.fresh)
        if leaked:
            raise SparkserveError(f"importing the tests' third-party modules loaded {', '.join(leaked[:5])} "
                                  f"from {', '.join(map(str, self.fresh))}: run without --fork")
        say(f"  fork: {len(self.preloaded)} module(s) imported once for every run")
        return rc, dt

    def __call__(self) -> tuple[int, float]:
        rc, dt, _ = self._fork()
        return rc, dt
