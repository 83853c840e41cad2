"""The dev container does what docs/DEV.md says: vllm and flashinfer run from the mounted trees, a Python
edit shows without a reinstall, a .cuh edit changes what FlashInfer's JIT builds (for 12.1a), and edits
committed in the trees come back to patches/ as exactly the patches they belong to."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

from sparkserve.serving import envfile
from sparkserve.supply import gitutil, pins
from sparkserve.supply.patches.series import load_series
from tests.devcontainer.conftest import python, run

# vLLM patch 0003 (the last vLLM patch, HEAD of the tree) changes vllm/envs.py. The JIT edit goes into a
# header of the XQA decode kernel (what the shipped profiles decode with on SM12x), the cheapest module of
# docker/jit-modules.toml to build from the tree (measured for 12.1a in the dev container on the loaded
# 2-core machine: xqa 42 s, decode-sink 130 s, page 132 s, norm 243 s); it is committed into FlashInfer's
# patch 0001 (the tree's HEAD) for the round trip.
PY_FILE = "vllm/envs.py"
CUH_FILE = "csrc/xqa/mha_components.cuh"
CUH_ANCHOR = "                                 uint32_t validColBeg, uint32_t validColEnd) {\n"
JIT_MODULE = "xqa-bf16kv-full"
# One value per run: neither ccache nor the JIT cache of an earlier run can hold the edited build.
NONCE = random.randrange(1 << 30, 1 << 31)


def test_vllm_and_flashinfer_import_from_the_trees(p: pins.Pins, trees: dict[str, Path]) -> None:
    out = python("import vllm, flashinfer; print(vllm.__file__); print(flashinfer.__file__); "
                 "print(vllm.__version__, flashinfer.__version__)").splitlines()
    print(f"\n  vllm.__file__ = {out[0]}\n  flashinfer.__file__ = {out[1]}")
    assert Path(out[0]) == trees["vllm"] / "vllm/__init__.py"
    assert Path(out[1]) == trees["flashinfer"] / "flashinfer/__init__.py"
    assert out[2].split() == [p.upstream("vllm").version, p.upstream("flashinfer").version]


def test_the_kernel_toolchain_and_tools_are_there() -> None:
    for tool in ("git", "cmake", "ninja", "ccache", "gdb", "nvcc", "cuobjdump", "llama-benchy"):
        assert shutil.which(tool), f"{tool} is not on PATH"
    assert "release 13.5" in run("nvcc", "--version").stdout
    python("import fastsafetensors, llama_benchy")


def test_the_installs_left_the_trees_clean(trees: dict[str, Path]) -> None:
    for tree in trees.values():
        assert gitutil.dirty(tree) == [], f"{tree}: generated files show in git status"
    # what the editable installs generate is really there, only ignored
    assert any(trees["vllm"].glob("vllm/*.abi3.so"))
    assert (trees["flashinfer"] / "flashinfer/data/include").resolve() == trees["flashinfer"] / "include"


def test_export_without_an_edit_is_byte_identical(trees: dict[str, Path]) -> None:
    for name in trees:
        out = run("python", "-m", "sparkserve", "patches", "export", "--upstream", name, "--check").stdout
        assert "byte-identical" in out, out


def test_a_python_edit_shows_without_a_reinstall(trees: dict[str, Path]) -> None:
    f = trees["vllm"] / PY_FILE
    f.write_text(f.read_text() + f"\nSPARKSERVE_DEV_PROBE = {NONCE}\n")
    assert python("import vllm.envs as e; print(e.SPARKSERVE_DEV_PROBE)").strip() == str(NONCE)


def _jit(*args: str, check: bool = True) -> str:
    proc = run("python", "-m", "sparkserve", "jit", *args, "--modules", "docker/jit-modules.toml",
               env={"FLASHINFER_CUDA_ARCH_LIST": "12.1a"}, check=check)
    return proc.stdout + proc.stderr


def _build(info: Path) -> tuple[Path, float, str, str]:
    """(library, seconds, its sha256, its SASS) of a build of the module from the tree."""
    _jit("prewarm", "--module", JIT_MODULE, "--build-info", str(info))
    built = json.loads(info.read_text())["built"][0]
    so = Path(built["library"])
    sass = run("cuobjdump", "--dump-sass", str(so)).stdout
    return so, float(built["seconds"]), hashlib.sha256(so.read_bytes()).hexdigest(), sass


def test_a_cuh_edit_changes_what_the_jit_builds(trees: dict[str, Path], tmp_path: Path) -> None:
    info = tmp_path / "build-info.json"
    verify = ("verify", "--build-info", str(info), "--arch", "sm_121a", "--cuobjdump", "cuobjdump")
    so, t_first, sha_first, sass_first = _build(info)
    assert so.is_relative_to(os.environ["FLASHINFER_WORKSPACE_BASE"]) and "/121a/" in str(so)
    elves = run("cuobjdump", "--list-elf", str(so)).stdout
    assert "sm_121a" in elves and "sm_120" not in elves, elves
    assert f"OK {JIT_MODULE}" in _jit(*verify)
    header = trees["flashinfer"] / CUH_FILE
    text = header.read_text()
    assert text.count(CUH_ANCHOR) == 1, f"{CUH_FILE} changed: update CUH_ANCHOR"
    # A memory barrier where the kernel masks a KV tile: harmless, and no compiler may drop it (volatile asm),
    # so the SASS must show one MEMBAR more. The per-run constant makes the edit new to every cache.
    probe = f'  asm volatile("membar.cta;");  // sparkserve dev container probe {NONCE}\n'
    header.write_text(text.replace(CUH_ANCHOR, CUH_ANCHOR + probe))
    stale = _jit(*verify, check=False)
    assert "serving would recompile it" in stale, stale
    so_again, t_edit, sha_edit, sass_edit = _build(info)
    print(f"\n  {JIT_MODULE} for 12.1a: {t_first:.0f}s from the tree, {t_edit:.0f}s after the .cuh edit; "
          f"{so.name} sha256 {sha_first[:12]} -> {sha_edit[:12]}")
    assert so_again == so and sha_edit != sha_first
    # (the .so's sha256 changes with any recompile: nvcc names its host stubs per run; the SASS does not)
    membars = (sass_first.count("MEMBAR"), sass_edit.count("MEMBAR"))
    print(f"  MEMBAR instructions in the SASS: {membars[0]} -> {membars[1]}")
    assert sass_edit != sass_first and membars[1] > membars[0]
    assert f"OK {JIT_MODULE}" in _jit(*verify)


def _changed(a: Path, b: Path) -> set[str]:
    names = {f.name for f in a.iterdir()} | {f.name for f in b.iterdir()}
    return {n for n in names if not (a / n).is_file() or not (b / n).is_file()
            or (a / n).read_bytes() != (b / n).read_bytes()}


def test_commit_and_export_change_exactly_those_patches(trees: dict[str, Path], tmp_path: Path) -> None:
    """The two edits above, committed into the patch commit at HEAD of each tree: the last of its series."""
    expect = {name: load_series(Path("."), name)[-1].path.name for name in trees}
    for name, tree in trees.items():
        gitutil.run(["commit", "-q", "-a", "--amend", "--no-edit", "--cleanup=verbatim"], tree)
        out = tmp_path / name
        shutil.copytree(Path("patches") / name, out)
        said = run("python", "-m", "sparkserve", "patches", "export", "--upstream", name,
                   "--out", str(out)).stdout
        print(f"\n  {said.strip()}")
        assert _changed(Path("patches") / name, out) == {expect[name]}
        assert f"{expect[name]} (changed)" in said
    assert f"+SPARKSERVE_DEV_PROBE = {NONCE}" in (tmp_path / "vllm" / expect["vllm"]).read_text()
    assert f"+  asm volatile(\"membar.cta;\");  // sparkserve dev container probe {NONCE}" in (
        tmp_path / "flashinfer" / expect["flashinfer"]).read_text()


def test_the_serving_entrypoint_runs_on_the_trees(trees: dict[str, Path], tmp_path: Path) -> None:
    """The `serve` profile's command up to the GPU check: banner with the trees' patches, the profile's
    vLLM command, then the refusal a machine without GPU gets."""
    env = envfile.read(Path("profiles/spark.env"), {})
    env["HF_HOME"] = str(tmp_path / "empty-hf-cache")  # the model is never there, whatever the volume holds
    # --print-flags is the preflight: banner, command, then the model check (no model in this container)
    flags = run("python", "-m", "sparkserve.serving", "--print-flags", env=env, check=False)
    out = flags.stdout
    assert "command:" in out, flags.stderr
    applied = sum(len(load_series(Path("."), name)) for name in trees)
    assert f"patches applied: {applied}" in out and "vllm: 0002-quantize-lm-head-online-to-mxfp4" in out, out
    assert "-m vllm.entrypoints.openai.api_server" in out
    assert flags.returncode == 4 and "model not available" in flags.stderr, flags.stderr
    refused = run("python", "-m", "sparkserve.serving", env=env, check=False)
    assert refused.returncode == 3 and "refusing to start: no GPU" in refused.stderr, refused.stderr
