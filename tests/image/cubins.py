"""A Triton (or Gluon) kernel compiled ahead of time for a named GPU, without one, and what cuobjdump says
of its cubin: the gate tests' compile scripts import this in a Python of their own (gate_support.run_json puts
this folder on its path)."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def compile_cubin(fn: Any, signature: dict[str, str], constexprs: dict[str, int], arch: int,
                  options: dict[str, int] | None = None, aligned: set[str] | None = None) -> bytes:
    """FN's cubin for sm_ARCH: the signature's and the constants' entries that FN takes. With ALIGNED (names
    of integer arguments), every pointer and those arguments marked divisible by 16, as Triton's JIT
    specializes gpt-oss's tensors at run time; without it, nothing is marked."""
    consts = {c: v for c, v in constexprs.items() if c in fn.arg_names}
    sig = {a: signature[a] for a in fn.arg_names if a in signature} | {c: "constexpr" for c in consts}
    attrs = None if aligned is None else {
        (i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
        if a in sig and (sig[a].startswith("*") or a in aligned)}
    source = GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource
    src = source(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options or {}).asm["cubin"]


def k_loop(sass: str) -> int:
    """Instructions of a kernel's K loop: the body of its one backward branch."""
    ins = [(int(a, 16), op) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    where = {a: i for i, (a, _) in enumerate(ins)}
    loops = [i - where[int(m.group(1), 16)] + 1 for i, (a, op) in enumerate(ins)
             if (m := re.search(r"\bBRA\S*\s.*?0x([0-9a-f]+)", op)) and int(m.group(1), 16) < a]
    assert len(loops) == 1, loops
    return loops[0]


def facts(cubin: bytes, kernel: str, path: str, sass: bool = False) -> dict[str, Any]:
    """The cubin written to PATH, then its ELF listing, KERNEL's registers, stack and local memory, and with
    SASS its disassembly."""
    with open(path, "wb") as f:
        f.write(cubin)

    def dump(flag: str) -> str:
        return subprocess.run([CUOBJDUMP, flag, path], capture_output=True, text=True, check=True).stdout

    usage = dict(re.findall(r"([A-Z]+):(\d+)", dump("-res-usage").split(kernel + ":")[1]))
    return {"elf": dump("--list-elf").strip(), **{k: int(usage[k]) for k in ("REG", "STACK", "LOCAL")},
            **({"sass": dump("-sass")} if sass else {})}
