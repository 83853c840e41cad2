"""`sparkserve jit sass-check`: cuobjdump output parsing, expectation file validation, the check itself
(with a stand-in cuobjdump that prints the recorded format of cuobjdump 13.5.37)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.image import sass

REPO = Path(__file__).resolve().parents[2]

# The shape of `cuobjdump --dump-sass` 13.5.37 on a 12.0f + 12.1a build (encodings shortened).
SASS = """
Fatbin elf code:
================
arch = sm_120f
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for sm_120
\t.target\tsm_120

\t\tFunction : _Z6decodev
\t.headerflags\t@"EF_CUDA_SM120 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM120)"
        /*0000*/                   LDC R1, c[0x0][0x37c] ;                 /* 0x0000df00ff017b82 */
                                                                           /* 0x000fe40000000800 */
        /*0010*/                   FFMA R26, R26, R21, R19 ;               /* 0x0000001a1a1a7223 */
        /*0020*/               @P0 FFMA R2, R2, R3, R4 ;                   /* 0x0000001a1a1a7223 */
        /*0030*/              @!P1 BRA 0x620 ;                             /* 0x0000000400409947 */
        /*0040*/                   EXIT ;                                  /* 0x000000000000794d */

Fatbin elf code:
================
arch = sm_121a
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for sm_121a
\t.target\tsm_121a

\t\tFunction : _Z6decodev
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM121 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM121)"
        /*0000*/                   FFMA R26, R26, R21, R19 ;               /* 0x0000001a1a1a7223 */
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;   /* 0x0000000c0804723c */
        /*0020*/                   MEMBAR.ALL.GPU ;                        /* 0x0000000000007992 */
        /*0030*/                   EXIT ;                                  /* 0x000000000000794d */
"""
LIST_ELF = "ELF file    1: mod.1.sm_120.cubin\nELF file    2: mod.2.sm_121a.cubin\n"


def test_parse_sass() -> None:
    got = sass.parse_sass(SASS)
    assert set(got) == {"sm_120f", "sm_121a"}
    fam = got["sm_120f"]
    assert (fam.code_for, fam.elfs, fam.functions) == ("sm_120", 1, 1)
    assert fam.headerflags == {"EF_CUDA_SM120 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM120)"}
    # predicated instructions count; the encoding-only line does not
    assert dict(fam.opcodes) == {"LDC": 1, "FFMA": 2, "BRA": 1, "EXIT": 1}
    a121 = got["sm_121a"]
    assert a121.count("HMMA") == a121.count("HMMA.16816.F32.BF16") == 1
    assert a121.count("HMMA.16816.F32.F16") == 0 and a121.count("HMM") == 0
    assert a121.families()["MEMBAR"] == 1
    assert sass.parse_list_elf(LIST_ELF) == ["mod.1.sm_120.cubin", "mod.2.sm_121a.cubin"]
    assert sass.elf_arch("mod.1.sm_120.cubin") == "sm_120"


def _expect(**kw: object) -> str:
    fields = {"name": '"e"', "modules": '["mod*"]', "archs": '["sm_121a", "sm_120f"]',
              "must_contain": '["FFMA"]', "why": '"a CUDA-core kernel"'}
    fields.update({k: str(v) for k, v in kw.items()})
    body = "\n".join(f"{k} = {v}" for k, v in fields.items() if v != "None")
    return f"schema = 1\n[[expect]]\n{body}\n"


@pytest.mark.parametrize(("kw", "fragment"), [
    ({"why": "None"}, "expect[1].why: expected a string, got nothing"),
    ({"why": '" "'}, "needs a why"),
    ({"archs": '["12.1a"]'}, "not cuobjdump arch names"),
    ({"must_contain": "[]"}, "needs must_contain and/or must_not_contain"),
    ({"must_contain": "None", "must_not_contain": '[""]'}, "must_not_contain must be a list of opcodes"),
    ({"modules": "[]"}, "modules must be a non-empty list"),
    ({"must_not_contain": '["FFMA"]'}, "both required and forbidden"),
    ({"extra": "1"},
     "expect[1].extra: unknown key (known: archs, modules, must_contain, must_not_contain, name, why)"),
])
def test_bad_expectations(kw: dict[str, object], fragment: str) -> None:
    with pytest.raises(SparkserveError) as info:
        sass.parse_sass_rules(_expect(**kw))
    assert fragment in str(info.value)


def test_repo_expectations() -> None:
    """Every kind the issue names has a tensor-core / CUDA-core expectation on both archs."""
    exps = {e.name: e for e in sass.load_sass_rules(REPO / "docker" / "jit-sass.toml")}
    for name, pattern, opcode in [("xqa-tensor-core", "xqa-*", "HMMA.16816.F32.BF16"),
                                  ("fa2-prefill-sink-tensor-core", "prefill-sink-*", "HMMA.16816.F32.BF16"),
                                  ("decode-sink-cuda-core", "decode-sink-*", "FFMA")]:
        e = exps[name]
        assert pattern in e.modules and set(e.archs) == {"sm_121a", "sm_120f"} and opcode in e.must_contain
    assert "HMMA" in exps["decode-sink-cuda-core"].must_not_contain
    assert all(set(e.archs) <= {"sm_121a", "sm_120f"} for e in exps.values())


def _fake_cache(tmp_path: Path) -> tuple[Path, str]:
    cache = tmp_path / "jit-cache"
    so = cache / ".cache" / "mod" / "mod.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"")
    (cache / "sparkserve-build-info.json").write_text(json.dumps(
        {"built": [{"name": "mod-a", "library": "/opt/jit-cache/.cache/mod/mod.so"}]}))
    (tmp_path / "sass.txt").write_text(SASS)
    (tmp_path / "elf.txt").write_text(LIST_ELF)
    tool = tmp_path / "cuobjdump"
    tool.write_text(f'#!/bin/sh\ncase "$1" in --list-elf) cat {tmp_path}/elf.txt;; '
                    f'--dump-sass) cat {tmp_path}/sass.txt;; *) exit 1;; esac\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return cache, str(tool)


def test_check(tmp_path: Path) -> None:
    cache, tool = _fake_cache(tmp_path)
    exp = tmp_path / "e.toml"
    exp.write_text(_expect(must_not_contain='["QMMA"]'))
    problems, reports = sass.check(cache, exp, tool)
    assert problems == []
    assert [r.module for r in reports] == ["mod-a"]
    assert sass.describe(reports[0]) == (
        "--list-elf 1 x *.sm_120.cubin, 1 x *.sm_121a.cubin; "
        "fatbin arch sm_121a: code for sm_121a, flags EF_CUDA_ACCELERATORS EF_CUDA_SM121 "
        "EF_CUDA_VIRTUAL_SM(EF_CUDA_SM121); "
        "fatbin arch sm_120f: code for sm_120, flags EF_CUDA_SM120 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM120)")
    table = sass.table(reports, ["FFMA", "HMMA"])
    assert "| mod-a | sm_121a | 1 | 1 | 4 | 1 | 1 |" in table
    assert "| mod-a | sm_120f | 1 | 1 | 5 | 2 | 0 |" in table
    # a tensor-core expectation fails on the sm_120f build, which has no HMMA; a forbidden one fails too
    exp.write_text(_expect(must_contain='["HMMA"]', must_not_contain='["MEMBAR"]'))
    problems, _ = sass.check(cache, exp, tool)
    assert problems == ["mod-a sm_121a [e]: 1 MEMBAR instruction(s), expected none (a CUDA-core kernel)",
                        "mod-a sm_120f [e]: no HMMA instruction (a CUDA-core kernel)"]
    # an arch that was not built, and an expectation that selects nothing
    exp.write_text(_expect(archs='["sm_90a"]') + _expect(name='"f"', modules='["nothing-*"]')[11:])
    problems, _ = sass.check(cache, exp, tool)
    assert any("no sm_90a ELF" in p for p in problems)
    assert any("expectation 'f': no built module matches" in p for p in problems)
