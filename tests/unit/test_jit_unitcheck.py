"""`sparkserve jit unit-check`: the checks file, build-file lookup, the measured compile, the SASS
verdicts (trap-only kernels, opcode rules) and the report. No toolchain: ninja and cuobjdump are
stand-ins that print the recorded formats."""

from __future__ import annotations

import json
import re
import stat
from collections import Counter
from pathlib import Path

import pytest

from sparkserve.errors import SparkserveError
from sparkserve.image import sass, unitcheck

REPO = Path(__file__).resolve().parents[2]

CHECKS = """
schema = 1
[[unit]]
name = "n8"
kind = "cutlass_fused_moe_sm120"
source = "k_N8_group0.generated.cu"
why = "narrow tile"

[[expect]]
name = "mma"
modules = ["n*"]
archs = ["sm_121a", "sm_120f"]
why = "block-scaled mma.sync"
must_contain = ["QMMA.SF"]
must_not_contain = ["HGMMA"]
"""

NINJA = """ninja_required_version = 1.3
cuda_cflags = -O3 $
    -gencode=arch=compute_121a,code=sm_121a
rule cuda_compile
  command = $nvcc_launcher $nvcc -c $in -o $out $cuda_cflags
build /w/out/120_k_N8_group0.generated.cuda.o: cuda_compile /w/gen/120/k_N8_group0.generated.cu
build /w/out/120_k_N16_group0.generated.cuda.o: cuda_compile /w/gen/120/k_N16_group0.generated.cu
build /w/out/lib.so: link /w/out/120_k_N8_group0.generated.cuda.o
"""

# `cuobjdump --dump-sass` 13.5.37 shape: one 12.0f and one 12.1a ELF, a real kernel and a stub.
SASS = """
Fatbin elf code:
================
arch = sm_120f
code version = [1,8]

\tcode for sm_120
\t\tFunction : _Z11gemm_kernelv
\t.headerflags\t@"EF_CUDA_SM120 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM120)"
        /*0000*/                   LDSM.16.M88.2 R4, [R2] ;                /* 0x0 */
        /*0010*/                   QMMA.SF.16832.F32.E2M1.E4M3.E8 R8, R12, R4, R8, R20, R21, URZ ; /* 0x0 */
        /*0020*/              @!P0 BPT.TRAP 0x1 ;                          /* 0x0 */
        /*0030*/                   EXIT ;                                  /* 0x0 */

Fatbin elf code:
================
arch = sm_121a
code version = [1,8]

\tcode for sm_121a
\t\tFunction : _Z11gemm_kernelv
        /*0000*/                   QMMA.SF.16832.F32.E2M1.E4M3.E8 R8, R12, R4, R8, R20, R21, URZ ; /* 0x0 */
        /*0010*/                   EXIT ;                                  /* 0x0 */
\t\tFunction : _Z9stub_kernv
        /*0000*/                   MOV R4, 0x10 ;                          /* 0x0 */
        /*0010*/                   CALL.ABS.NOINC 0x0 ;                    /* 0x0 */
        /*0020*/                   BPT.TRAP 0x1 ;                          /* 0x0 */
        /*0030*/                   EXIT ;                                  /* 0x0 */
"""


def test_checks_file_of_the_repo_is_valid() -> None:
    checks = unitcheck.load_checks(REPO / "docker" / "jit-unit-checks.toml")
    names = {u.name for u in checks.units}
    assert {"moe-sm120-n8-swapab", "moe-sm120-n16-swapab"} <= names
    for u in checks.units:
        assert u.kind == "cutlass_fused_moe_sm120" and "SwapAB" in u.source
        archs = {a for e in checks.expectations_for(u.name) for a in e.archs}
        assert archs == {"sm_121a", "sm_120f"}
        assert any(p.startswith("QMMA.SF") for e in checks.expectations_for(u.name) for p in e.must_contain)


def test_checks_file_of_the_repo_names_generated_units() -> None:
    """Every unit's source is a file the patched generator writes (the sdist tree is not needed: the
    names follow generate_kernels.py's pattern for the narrow-N SwapAB units)."""
    checks = unitcheck.load_checks(REPO / "docker" / "jit-unit-checks.toml")
    pattern = (r"cutlass_kernel_file_gemm_grouped_sm120_M128_BS_N(8|16)_SwapAB_(none|finalize)_(f16|bf16)"
               r"_group0\.generated\.cu")
    for u in checks.units:
        assert re.fullmatch(pattern, u.source), u.source


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.replace('kind = "cutlass_fused_moe_sm120"', 'kind = "nope"'), "unknown kind"),
    (lambda t: t.replace('source = "k_N8_group0.generated.cu"', 'source = "a/b.cu"'), "file name of a .cu"),
    (lambda t: t.replace('why = "narrow tile"', 'why = " "'), "needs a why"),
    (lambda t: t.replace('modules = ["n*"]', 'modules = ["x*"]'), "matches no unit"),
    (lambda t: t + '\n[[unit]]\nname = "n8"\nkind = "sampling"\nsource = "a.cu"\nwhy = "w"\n', "unique name"),
    (lambda t: t + '\n[[unit]]\nname = "other"\nkind = "sampling"\nsource = "a.cu"\nwhy = "w"\n',
     r"has no \[\[expect\]\] rule"),
    (lambda t: t.replace('source = "k_N8_group0.generated.cu"', 'source = "k.cu"\nextra = 1'),
     r"unit\[1\]\.extra: unknown key"),
])
def test_checks_file_rejects(mutate, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SparkserveError, match=message):
        unitcheck.parse_checks(mutate(CHECKS))


def test_find_objects() -> None:
    got = unitcheck.find_objects(NINJA, ["k_N8_group0.generated.cu", "k_N16_group0.generated.cu"])
    assert got == {"k_N8_group0.generated.cu": "/w/out/120_k_N8_group0.generated.cuda.o",
                   "k_N16_group0.generated.cu": "/w/out/120_k_N16_group0.generated.cuda.o"}
    with pytest.raises(SparkserveError, match="no cuda_compile statement"):
        unitcheck.find_objects(NINJA, ["missing.cu"])
    with pytest.raises(SparkserveError, match="more than one"):
        unitcheck.find_objects(NINJA + NINJA.splitlines()[5] + "\n", ["k_N8_group0.generated.cu"])


def test_compile_command() -> None:
    obj = "/w/out/a.cuda.o"
    cmd = f"/cuda/bin/nvcc --generate-dependencies-with-compile -MF {obj}.d -c /w/a.cu -o {obj} "
    assert unitcheck.compile_command(f"\n{cmd}\n", obj) == cmd
    with pytest.raises(SparkserveError, match="no command"):
        unitcheck.compile_command("\n", obj)
    with pytest.raises(SparkserveError, match="not its nvcc compile"):
        unitcheck.compile_command("c++ -c a.cpp -o other.o", obj)


def test_run_measured_reports_exit_time_rss_and_output(tmp_path: Path) -> None:
    # The child of the shell allocates ~40 MiB: wait4's ru_maxrss must see the descendant, as time -v does.
    cmd = "python3 -c \"b = bytearray(40 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('done')\"; exit 3"
    m = unitcheck.run_measured(cmd, timeout_s=60, cwd=tmp_path)
    assert m.returncode == 3 and "done" in m.output_tail
    assert m.max_rss_kib > 40 * 1024
    assert m.seconds >= 0 and m.cpu_seconds > 0


def test_run_measured_stops_at_the_timeout() -> None:
    m = unitcheck.run_measured("sleep 30", timeout_s=0.5)
    assert m.returncode != 0 and "stopped after" in m.output_tail and m.seconds < 10


def test_trap_only() -> None:
    assert unitcheck.trap_only(Counter({"MOV": 1, "CALL.ABS.NOINC": 1, "BPT.TRAP": 1, "EXIT": 1}))
    # a real kernel may keep a guarded trap next to its MMAs
    assert not unitcheck.trap_only(Counter({"QMMA.SF.16832.F32.E2M1.E4M3.E8": 8, "BPT.TRAP": 1}))
    assert not unitcheck.trap_only(Counter({"MOV": 1, "EXIT": 1}))


def test_judge_flags_trap_only_kernels_missing_arch_and_opcode_rules() -> None:
    checks = unitcheck.parse_checks(CHECKS)
    unit = checks.units[0]
    funcs = sass.parse_sass_functions(SASS)
    assert set(funcs) == {"sm_120f", "sm_121a"}
    assert funcs["sm_121a"]["_Z9stub_kernv"]["BPT.TRAP"] == 1
    problems = unitcheck.judge(unit, funcs, checks.expectations_for(unit.name))
    assert problems == ["n8 sm_121a: _Z9stub_kernv is trap-only (4 instructions, no tensor-core MMA)"]

    only_120 = {"sm_120f": funcs["sm_120f"]}
    assert any("no sm_121a code" in p for p in unitcheck.judge(unit, only_120, checks.expectations))

    no_mma = {a: {"k": Counter({"FFMA": 3, "HGMMA.64x8x16": 1})} for a in ("sm_120f", "sm_121a")}
    problems = unitcheck.judge(unit, no_mma, checks.expectations)
    assert sum("no QMMA.SF instruction" in p for p in problems) == 2
    assert sum("1 HGMMA instruction(s), expected none" in p for p in problems) == 2


def _stand_in(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_run_end_to_end_with_stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run(): build file -> ninja -t commands -> measured compile -> cuobjdump -> verdicts."""
    obj = tmp_path / "out" / "120_k_N8_group0.generated.cuda.o"
    build = tmp_path / "build.ninja"
    build.write_text(f"build {obj}: cuda_compile {tmp_path}/gen/k_N8_group0.generated.cu\n")
    checks = tmp_path / "checks.toml"
    checks.write_text(CHECKS)
    # ninja stand-in: prints the compile command (a fake nvcc that writes the object)
    # (an object of this machine's arch: the check reads its ELF header)
    nvcc = _stand_in(tmp_path / "nvcc", 'while [ "$1" != "-o" ]; do shift; done; cp /bin/sh "$2"\n')
    ninja = _stand_in(tmp_path / "ninja", f'echo "{nvcc} -c {tmp_path}/gen/k.cu -o {obj}"\n')
    sass_file = tmp_path / "sass.txt"
    sass_file.write_text(SASS.replace("\t\tFunction : _Z9stub_kernv", "\t\tFunction : _Z9stub_kernv\n"
                                      "        /*0000*/  QMMA.SF.16832.F32.E2M1.E4M3.E8 R0, R0, R0, R0 ;"))
    cuobjdump = _stand_in(tmp_path / "cuobjdump", f'cat {sass_file}\n')
    monkeypatch.setattr(unitcheck, "ninja_exe", lambda: ninja)
    lines: list[str] = []
    results = unitcheck.run(checks, cuobjdump, build_file=build, say=lines.append)
    assert [r.problems for r in results] == [[]]
    r = results[0]
    assert obj.is_file() and r.measured is not None and r.measured.returncode == 0
    assert any("compiling k_N8_group0.generated.cu" in ln for ln in lines)
    rows = unitcheck.table(results).splitlines()
    assert rows[0].startswith("| unit | compile s | CPU s | peak RSS MiB | arch |") and len(rows) == 4
    assert "| n8 |" in rows[2] and "| sm_121a | 2 |" in rows[2]
    doc = json.loads(unitcheck.report_json(results))
    assert doc["units"][0]["object"] == str(obj) and doc["units"][0]["problems"] == []
    with pytest.raises(SparkserveError, match="no such unit"):
        unitcheck.run(checks, cuobjdump, only=["zz"], build_file=build)


def test_run_reports_a_failed_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    obj = tmp_path / "o.cuda.o"
    build = tmp_path / "build.ninja"
    build.write_text(f"build {obj}: cuda_compile /g/k_N8_group0.generated.cu\n")
    checks = tmp_path / "checks.toml"
    checks.write_text(CHECKS)
    nvcc = _stand_in(tmp_path / "nvcc", 'echo "error: static assertion failed" >&2; exit 2\n')
    ninja = _stand_in(tmp_path / "ninja", f'echo "{nvcc} -c k.cu -o {obj}"\n')
    monkeypatch.setattr(unitcheck, "ninja_exe", lambda: ninja)
    results = unitcheck.run(checks, "/nonexistent/cuobjdump", build_file=build, say=lambda _: None)
    assert len(results[0].problems) == 1
    assert "compile failed (exit 2)" in results[0].problems[0]
    assert "static assertion failed" in results[0].problems[0]


def test_run_flags_an_object_of_the_wrong_cpu_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit compiled for another host arch than asked (e.g. no cross compiler took the host code)."""
    from sparkserve.image import cross

    obj = tmp_path / "out" / "120_k_N8_group0.generated.cuda.o"
    build = tmp_path / "build.ninja"
    build.write_text(f"build {obj}: cuda_compile {tmp_path}/gen/k_N8_group0.generated.cu\n")
    checks = tmp_path / "checks.toml"
    checks.write_text(CHECKS)
    other = "arm64" if cross.host_arch() == "amd64" else "amd64"
    header = tmp_path / "other.o"
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    head[18:20] = cross.ARCHS[other][0].to_bytes(2, "little")
    header.write_bytes(bytes(head))
    nvcc = _stand_in(tmp_path / "nvcc", f'while [ "$1" != "-o" ]; do shift; done; cp {header} "$2"\n')
    ninja = _stand_in(tmp_path / "ninja", f'echo "{nvcc} -c {tmp_path}/gen/k.cu -o {obj}"\n')
    sass_file = tmp_path / "sass.txt"
    sass_file.write_text(SASS.replace("\t\tFunction : _Z9stub_kernv", "\t\tFunction : _Z9stub_kernv\n"
                                      "        /*0000*/  QMMA.SF.16832.F32.E2M1.E4M3.E8 R0, R0, R0, R0 ;"))
    cuobjdump = _stand_in(tmp_path / "cuobjdump", f'cat {sass_file}\n')
    monkeypatch.setattr(unitcheck, "ninja_exe", lambda: ninja)
    results = unitcheck.run(checks, cuobjdump, build_file=build, say=lambda _: None)
    assert results[0].problems == [f"n8: the object is {other} code, not {cross.host_arch()}"]
