"""GPU proof for patches/vllm/0001 (Triton MXFP4 quantize kernel masks: `and` -> `&`).

Runs vLLM's `_downcast_to_mxfp` kernel twice in one process, once from the unpatched and once from
the patched source (both derived from the installed file and the repo's patch), on random inputs,
and requires bit-identical packed values and scales. Also records the Triton deprecation warnings
each variant raises while compiling.

Needs a CUDA GPU with the pinned vllm/triton installed; skipped otherwise.
In a proof (`sparkserve proof run`) the results go to mxfp4_quant_mask_patch.json in the record.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import warnings
from pathlib import Path

import pytest
from proof_artifacts import artifact_path

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
triton = pytest.importorskip("triton")
pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]
PATCH = next((REPO / "patches/vllm").glob("0001-triton-mxfp4-quantize-kernel-*.patch"))
REL = "vllm/model_executor/layers/quantization/utils/mxfp4_utils.py"

# (outer, quant) shapes: gpt-oss dense layers, plus ragged ones where the masks cut blocks
SHAPES = [(5120, 2880), (2880, 4096), (201088 // 16, 2880), (130, 96), (1, 64), (77, 94),
          (300, 2890), (129, 33 * 2), (4097, 4160)]
DTYPES = ["bfloat16", "float16"]


def _hunks(diff: str) -> list[tuple[str, str]]:
    """(old block, new block) per hunk of a single-file diff."""
    out = []
    for body in re.split(r"^@@ [^\n]*@@[^\n]*\n", diff, flags=re.M)[1:]:
        old, new = [], []
        for line in body.splitlines(keepends=True):
            if line.startswith("diff --git"):
                break
            tag, text = line[:1], line[1:]
            if tag in " -":
                old.append(text)
            if tag in " +":
                new.append(text)
        out.append(("".join(old), "".join(new)))
    return out


def variants() -> tuple[str, str]:
    import vllm

    installed = (Path(vllm.__file__).parent.parent / REL).read_text()
    diff = PATCH.read_text().split("\n---\ndiff --git", 1)[1]
    unpatched = patched = installed
    for old, new in _hunks(diff):
        if installed.count(new) == 1:  # the environment is patched already
            unpatched = unpatched.replace(new, old, 1)
        else:
            assert installed.count(old) == 1, "patch hunk not found in the installed file"
            patched = patched.replace(old, new, 1)
    assert unpatched != patched
    assert " and mask_n" in unpatched and " and mask_n" not in patched
    return unpatched, patched


def kernel_namespace(source: str, tag: str) -> dict[str, object]:
    """Exec only the quantize kernel and its wrapper (the module registers custom ops at import,
    so it cannot be imported twice). The source goes through a real file so Triton can read it."""
    start = source.index("def permute_shape(")
    end = source.index("def mxfp4_quantize(")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sparkserve_mxfp4_{tag}.py"
    path.write_text("import torch\nfrom vllm.triton_utils import tl, triton\n\n\n"
                    + source[start:end])
    spec = importlib.util.spec_from_file_location(f"sparkserve_mxfp4_{tag}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return vars(mod)


def test_patched_kernel_is_bit_identical() -> None:
    unpatched_src, patched_src = variants()
    fns = {}
    caught: dict[str, list[str]] = {}
    for tag, src in (("unpatched", unpatched_src), ("patched", patched_src)):
        fns[tag] = kernel_namespace(src, tag)["downcast_to_mxfp"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = []
    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        for outer, quant in SHAPES:
            for axis in (-1, 0):
                shape = (outer, quant) if axis == -1 else (quant, outer)
                # magnitudes over many binades so the scales differ across blocks
                x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
                x = (x * torch.exp2(torch.randint(-20, 20, shape, generator=gen,
                                                  device="cuda").float())).to(dtype)
                outs = {}
                for tag, fn in fns.items():
                    with warnings.catch_warnings(record=True) as w:
                        warnings.simplefilter("always")
                        q, s, _ = fn(x, axis=axis)
                        torch.cuda.synchronize()
                    caught.setdefault(tag, []).extend(str(m.message) for m in w)
                    outs[tag] = (q, s)
                same_q = torch.equal(outs["unpatched"][0], outs["patched"][0])
                same_s = torch.equal(outs["unpatched"][1], outs["patched"][1])
                cases.append({"dtype": dtype_name, "shape": list(shape), "axis": axis,
                              "packed_identical": same_q, "scales_identical": same_s,
                              "packed_bytes": outs["patched"][0].numel()})
    result = {
        "patch": PATCH.name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": torch.cuda.get_device_name(),
        "cases": cases,
        "all_identical": all(c["packed_identical"] and c["scales_identical"] for c in cases),
        "warnings": {tag: sorted(set(msgs)) for tag, msgs in caught.items()},
    }
    out = artifact_path("mxfp4_quant_mask_patch.json")
    if out:
        out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}, indent=1))
    assert result["all_identical"], [c for c in cases if not c["packed_identical"]]
    assert not any("deprecat" in m.lower() for m in result["warnings"].get("patched", []))


def _compile_warnings(source: str, tag: str) -> list[str]:
    """Triton's warnings while compiling the kernel of `source` afresh (a new module, an empty cache)."""
    fn = kernel_namespace(source, tag)["downcast_to_mxfp"]
    x = torch.randn(130, 96, device="cuda", dtype=torch.bfloat16)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn(x, axis=-1)
        torch.cuda.synchronize()
    return [str(m.message) for m in w if "deprecat" in str(m.message).lower()]


def test_the_installed_kernel_compiles_without_the_deprecation(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel this environment ships (patched, or with the hunk reverted by `patches mutate`) compiled
    in an empty Triton cache: a cached kernel would compile nothing and warn nothing. The unpatched kernel
    must warn there, or this Triton no longer needs the patch."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))
    import vllm

    installed = (Path(vllm.__file__).parent.parent / REL).read_text()
    unpatched, _ = variants()
    got = {"installed": _compile_warnings(installed, "installed_fresh"),
           "unpatched": _compile_warnings(unpatched, "unpatched_fresh")}
    out = artifact_path("mxfp4_quant_mask_fresh_compile.json")
    if out:
        out.write_text(json.dumps(got, indent=1))
    assert got["unpatched"], "the unpatched kernel compiled without a deprecation warning: patch not needed"
    assert not got["installed"], f"the installed kernel is not the patched one: {got['installed']}"
