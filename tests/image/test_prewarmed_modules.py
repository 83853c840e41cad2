"""Every FlashInfer module the image prewarmed loads the way the server loads it (`sparkserve jit
load-check`): listed for the build's set, FlashInfer's AOT artifact, a library of this machine's arch,
every symbol bound with RTLD_NOW (or explained in docker/jit-unbound.toml), and FlashInfer's loader returns
it with its functions. Runs in the amd64 image and, under emulation, in the arm64 one."""

from __future__ import annotations

from pathlib import Path

from sparkserve.image import loadcheck

ROOT = Path("/opt/sparkserve")


def test_every_prewarmed_module_loads_as_serving_loads_it() -> None:
    results, general = loadcheck.check(ROOT / "docker" / "jit-modules.toml",
                                       Path("/opt/jit-cache/sparkserve-build-info.json"),
                                       ROOT / "docker" / "jit-unbound.toml")
    problems = general + [f"{r.name}: {p}" for r in results for p in r.problems]
    assert not problems, "\n".join(problems)
    assert results and all(r.functions > 0 for r in results)
