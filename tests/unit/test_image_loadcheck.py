"""The parts of `jit load-check` that need no FlashInfer: the CUDA driver entry points a module leaves
undefined, and the stub that binds them where no driver is installed. Built with the machine's gcc: a
library that needs libcuda.so.1 fails to load with RTLD_NOW before the stub is loaded, and loads after."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from sparkserve.image import loadcheck


def build(tmp: Path, name: str, source: str, *args: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True)
    return out


def test_the_driver_stub_binds_what_a_module_needs_from_libcuda(tmp_path: Path) -> None:
    # A fake libcuda.so.1 to link against (what the image's /opt/cuda-stubs is), then a "module" that
    # calls two driver functions and one of its own libraries' (not a driver symbol).
    link = tmp_path / "link"
    link.mkdir()
    subprocess.run(["gcc", "-shared", "-nostdlib", "-Wl,-soname,libcuda.so.1", "-o", str(link / "libcuda.so"),
                    "-x", "c", "/dev/null"], check=True)
    module = build(tmp_path, "module", "int cuInit(int); int cuLaunchKernel(void);\n"
                   "int go(void) { return cuInit(0) + cuLaunchKernel(); }\n",
                   f"-L{link}", "-lcuda", "-Wl,--allow-shlib-undefined")
    assert loadcheck.driver_symbols([module]) == ["cuInit", "cuLaunchKernel"]
    # In a fresh process: without the stub the module does not load; with it, every symbol binds.
    probe = ("import ctypes, os, sys\n"
             "if len(sys.argv) > 2: ctypes.CDLL(sys.argv[2], mode=os.RTLD_NOW | os.RTLD_GLOBAL)\n"
             "ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    bare = subprocess.run(["python3", "-c", probe, str(module)], capture_output=True, text=True, env=env)
    assert bare.returncode != 0  # no libcuda.so.1, or (a host with a stub or driver of its own) no cuInit
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    stub = loadcheck.driver_stub(loadcheck.driver_symbols([module]), stub_dir)
    ok = subprocess.run(["python3", "-c", probe, str(module), str(stub)], capture_output=True, text=True,
                        env=env)
    assert ok.returncode == 0, ok.stderr
    # A stub that lacks one of the symbols leaves it unbound: RTLD_NOW fails, naming it.
    partial_dir = tmp_path / "partial"
    partial_dir.mkdir()
    partial = loadcheck.driver_stub(["cuInit"], partial_dir)
    bad = subprocess.run(["python3", "-c", probe, str(module), str(partial)], capture_output=True, text=True,
                         env=env)
    assert bad.returncode != 0 and "cuLaunchKernel" in bad.stderr


def test_exported_functions_are_the_tvm_ffi_exports(tmp_path: Path) -> None:
    lib = build(tmp_path, "exports", "int __tvm_ffi_run(void) { return 0; }\n"
                "int __tvm_ffi_plan(void) { return 0; }\n"
                "int __tvm_ffi__metadata_run(void) { return 0; }\n"
                "int helper(void) { return 0; }\n")
    assert loadcheck.exported_functions(lib) == ["plan", "run"]


def test_a_stub_with_no_symbols_still_builds(tmp_path: Path) -> None:
    stub = loadcheck.driver_stub([], tmp_path)
    ctypes.CDLL(str(stub), mode=os.RTLD_NOW)


def test_driver_symbols_of_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="nm -D"):
        loadcheck.driver_symbols([tmp_path / "nothing.so"])


def test_the_shipped_unbound_rules_parse_and_explain_only_their_dispatch_cases() -> None:
    rules = loadcheck.load_unbound(Path(__file__).resolve().parents[2] / "docker" / "jit-unbound.toml")
    cta32 = ("_ZN10flashinfer38BatchPrefillWithPagedKVCacheDispatchedILb0ELj32ELj64ELj64ELNS_15PosEncoding"
             "ModeE0ELb0ELNS_8MaskModeE3E13AttentionSink11PagedParamsEE9cudaErrorT7_PNS6_6DTypeOEPfbP11CUstream_st")
    cta64 = cta32.replace("ILb0ELj32E", "ILb0ELj64E")
    ragged = "_ZN10flashinfer39BatchPrefillWithRaggedKVCacheDispatchedILj32ELj64ELj64ELNS_15PosEncodingMode"
    assert loadcheck.explained("prefill_sink", [cta32, cta64, ragged, "cuInit"], rules) == {
        "fa2-prefill-cta-tile-q-32": [cta32, ragged]}
    # not for another kind of module
    assert loadcheck.explained("xqa", [cta32], rules) == {}


@pytest.mark.parametrize(("text", "message"), [
    ("schema = 1\n[[unbound]]\nname = 'a'\nkinds = ['nope']\nsymbols = 'x'\nwhy = 'y'\n", "kinds must list"),
    ("schema = 1\n[[unbound]]\nname = 'a'\nkinds = ['xqa']\nsymbols = '('\nwhy = 'y'\n", "not a regular"),
    ("schema = 1\n[[unbound]]\nname = 'a'\nkinds = ['xqa']\nsymbols = 'x'\nwhy = ' '\n", "needs a why"),
    ("schema = 1\n", "no \\[\\[unbound\\]\\] entries"),
])
def test_bad_unbound_rules_are_refused(text: str, message: str) -> None:
    with pytest.raises(Exception, match=message):
        loadcheck.parse_unbound(text)


def test_a_rule_that_explains_nothing_of_a_built_kind_is_stale() -> None:
    rules = loadcheck.parse_unbound("schema = 1\n[[unbound]]\nname = 'r'\nkinds = ['prefill_sink']\n"
                                    "symbols = 'x'\nwhy = 'y'\n")
    used = loadcheck.Loaded("m", "/lib.so", explained={"r": 2})
    unused = loadcheck.Loaded("m", "/lib.so")
    assert loadcheck.stale_rules(rules, [used], {"prefill_sink"}, Path("u.toml")) == []
    assert "is stale" in loadcheck.stale_rules(rules, [unused], {"prefill_sink"}, Path("u.toml"))[0]
    # no module of its kind was built (a CI set without it): nothing to say
    assert loadcheck.stale_rules(rules, [unused], {"xqa"}, Path("u.toml")) == []
