"""`jit cubin-compare` verdicts (src/sparkserve/image/cubins.py) on ELF-like files and a stand-in for
cuobjdump that prints the SASS each test file carries: identical bytes, bytes that differ only in the
module id of internal-linkage names, and real code differences (which fail)."""

from __future__ import annotations

import json
import stat
import struct
from pathlib import Path

import pytest

from sparkserve.image import cubins

FAKE_CUOBJDUMP = """#!/usr/bin/env python3
import pathlib, sys
# --dump-sass FILE: the file's text after a 'SASS:' marker (up to a NUL) is its dump
args = sys.argv[1:]
if args[0] == "--dump-sass":
    print(pathlib.Path(args[1]).read_bytes().split(b"SASS:", 1)[1].split(b"\\0", 1)[0].decode())
else:
    sys.exit(f"unexpected arguments {args}")
"""


@pytest.fixture
def cuobjdump(tmp_path: Path) -> str:
    tool = tmp_path / "bin" / "cuobjdump"
    tool.parent.mkdir()
    tool.write_text(FAKE_CUOBJDUMP)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(tool)


def elf(tmp: Path, name: str, module_id: str, sass: str) -> Path:
    f = tmp / name
    name_bytes = b"_ZN46_INTERNAL_" + module_id.encode() + b"_15_batch_decode_cu_2c0af0564cuda3std"
    f.write_bytes(b"\x7fELF strtab " + name_bytes + b"\0SASS:" + sass.encode())
    return f


SASS = """
	code for sm_121a
		Function : _ZN46_INTERNAL_{id}_15_batch_decode_cu_2c0af0564cuda3std6kernelEv
	/*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
	/*0010*/                   EXIT ;
"""


def test_the_same_bytes_are_identical(tmp_path: Path, cuobjdump: str) -> None:
    a = elf(tmp_path, "a", "798a45eb", SASS.format(id="798a45eb"))
    b = elf(tmp_path, "b", "798a45eb", SASS.format(id="798a45eb"))
    assert cubins.compare_elf(a, b, cuobjdump) == ("identical", 0, [])


def test_only_the_module_id_differs(tmp_path: Path, cuobjdump: str) -> None:
    a = elf(tmp_path, "a", "798a45eb", SASS.format(id="798a45eb"))
    b = elf(tmp_path, "b", "70656466", SASS.format(id="70656466"))
    assert cubins.compare_elf(a, b, cuobjdump) == ("module-id", 1, [])


def test_a_different_instruction_is_a_difference(tmp_path: Path, cuobjdump: str) -> None:
    a = elf(tmp_path, "a", "798a45eb", SASS.format(id="798a45eb"))
    b = elf(tmp_path, "b", "70656466", SASS.format(id="70656466").replace("HMMA.16816.F32.BF16", "HFMA2"))
    verdict, functions, differing = cubins.compare_elf(a, b, cuobjdump)
    assert verdict == "different" and functions == 1
    assert differing == ["_ZN46_INTERNAL_" + "x" * 36 + "4cuda3std6kernelEv"]


def test_a_difference_outside_the_code_is_a_difference(tmp_path: Path, cuobjdump: str) -> None:
    """Same SASS, but bytes that differ elsewhere than in the module id: not explained, so it fails."""
    a = elf(tmp_path, "a", "798a45eb", SASS.format(id="798a45eb"))
    b = tmp_path / "b"
    b.write_bytes(a.read_bytes().replace(b"strtab", b"strtaB"))
    verdict, _, differing = cubins.compare_elf(a, b, cuobjdump)
    assert verdict == "different" and differing == []


def test_a_comparison_reports_missing_and_different_elfs() -> None:
    cmp = cubins.ModuleComparison("xqa-fp8kv-swa", [
        cubins.ElfPair(1, "sm_120", "identical"),
        cubins.ElfPair(2, "sm_121a", "module-id", functions=3),
        cubins.ElfPair(3, "sm_121a", "different", functions=2, differing_functions=["k1"]),
        cubins.ElfPair(4, "sm_121a", "missing"),
    ])
    assert cmp.problems == ["xqa-fp8kv-swa: ELF 3 (sm_121a) differs: k1",
                            "xqa-fp8kv-swa: ELF 4 (sm_121a) is in one build only"]
    rows = cubins.table([cmp]).splitlines()
    assert rows[2] == "| xqa-fp8kv-swa | sm_121a | 3 | 0 | 1 | 2 | 5 |"
    assert rows[3] == "| xqa-fp8kv-swa | sm_120 | 1 | 1 | 0 | 0 | 0 |"
    assert json.loads(cubins.report_json([cmp]))[0]["problems"] == cmp.problems


def test_build_infos_map_libraries_under_the_image_base(tmp_path: Path) -> None:
    for side, names in (("a", ["m1", "m2"]), ("b", ["m2", "m3"])):
        (tmp_path / side).mkdir()
        (tmp_path / side / "sparkserve-build-info.json").write_text(json.dumps(
            {"built": [{"name": n, "library": f"/opt/jit-cache/.cache/{n}.so"} for n in names]}))
    assert cubins.only_in_one(tmp_path / "a", tmp_path / "b") == (["m1"], ["m3"])


def test_the_per_compilation_names_are_masked_by_their_mangled_length() -> None:
    """nvcc's `_INTERNAL_<hash>_<n>_<file>_<hash>_<pid>` identifier ends where its length prefix says (the
    process id runs into the rest of the name); two compilations differ only there."""
    a = b"_ZN58_INTERNAL_c590456f_22_batch_decode_kernel_cu_3b63eab3_12864cuda3std3__45__cpo5beginE"
    b = b"_ZN58_INTERNAL_372d074a_22_batch_decode_kernel_cu_11ad718a_12884cuda3std3__45__cpo5beginE"
    assert a != b and cubins.mask_module_id(a) == cubins.mask_module_id(b)
    assert cubins.mask_module_id(a).endswith(b"x4cuda3std3__45__cpo5beginE")
    # a different symbol stays different
    assert cubins.mask_module_id(a) != cubins.mask_module_id(a.replace(b"5beginE", b"3endE"))
    # a length prefix longer than what follows is left alone
    assert cubins.mask_module_id(b"99_INTERNAL_c590456f_") == b"99_INTERNAL_c590456f_"


def real_elf(strings: list[bytes], symbols: list[tuple[int, int]], info: bytes, sass: str) -> bytes:
    """A little-endian ELF64 with .shstrtab, .strtab, .symtab (symbol i names strings[i], value/size from
    symbols[i]), .nv.info and a section holding the SASS the fake cuobjdump prints."""
    strtab = b"\0" + b"".join(s + b"\0" for s in strings)
    offsets = [1 + sum(len(s) + 1 for s in strings[:i]) for i in range(len(strings))]
    symtab = b"".join(struct.pack("<IBBHQQ", off, 0x12, 0, 4, value, size)
                      for off, (value, size) in zip(offsets, symbols, strict=True))
    names = [b"", b".shstrtab", b".strtab", b".symtab", b".nv.info", b".sass"]
    shstrtab = b"".join(n + b"\0" for n in names)
    bodies = [b"", shstrtab, strtab, symtab, info, b"SASS:" + sass.encode() + b"\0"]
    kinds = [0, 3, 3, 2, 0x70000000, 1]
    data = bytearray(64)
    heads = []
    for i, body in enumerate(bodies):
        heads.append((shstrtab.find(names[i] + b"\0") if i else 0, kinds[i], len(data), len(body),
                      2 if i == 3 else 0, 24 if i == 3 else 0))
        data += body
    shoff = len(data)
    for name, kind, offset, size, link, entsize in heads:
        data += struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, link, 0, 1, entsize)
    data[:4] = b"\x7fELF"
    data[4:6] = b"\x02\x01"
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(bodies), 1)
    return bytes(data)


def internal(pid: str) -> bytes:
    ident = b"_INTERNAL_3c3769a8_27_batch_decode_jit_binding_cu_b481198f_" + pid.encode()
    return b"_ZN" + str(len(ident)).encode() + ident + b"4cuda3std5beginE"


def test_names_of_another_length_are_compared_section_by_section(tmp_path: Path, cuobjdump: str) -> None:
    """Two compilations whose process ids have 5 and 4 digits: every string offset after the first such
    name moves, the sections say the same."""
    sass = SASS.format(id="798a45eb")
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(real_elf([internal("12844"), b"kernel"], [(0, 8), (16, 32)], b"\x04\x11\x08\x00", sass))
    b.write_bytes(real_elf([internal("5294"), b"kernel"], [(0, 8), (16, 32)], b"\x04\x11\x08\x00", sass))
    assert len(a.read_bytes()) != len(b.read_bytes())
    assert cubins.compare_elf(a, b, cuobjdump) == ("module-id", 1, [])
    for changed in (real_elf([internal("5294"), b"kernel"], [(0, 8), (16, 32)], b"\x04\x11\x09\x00", sass),
                    real_elf([internal("5294"), b"kernel"], [(0, 8), (16, 48)], b"\x04\x11\x08\x00", sass),
                    real_elf([internal("5294"), b"kernek"], [(0, 8), (16, 32)], b"\x04\x11\x08\x00", sass)):
        b.write_bytes(changed)
        assert cubins.compare_elf(a, b, cuobjdump)[0] == "different"
