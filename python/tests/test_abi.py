"""The ctypes structs in clattn/_lib.py against the C compiler's layout of clattn.h:
every field's offset and each struct's size. Compiles a small C program with the
system's cc (skipped where there is no compiler or no repository header)."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from clattn import _lib

HEADER_DIR = Path(__file__).resolve().parents[2] / "include"
STRUCTS = {
    "clattn_tensor": _lib.Tensor,
    "clattn_attention_desc": _lib.Desc,
    "clattn_plan": _lib.Plan,
    "clattn_context_options": _lib.ContextOptions,
    "clattn_mod_buffer": _lib.ModBuffer,
    "clattn_mods": _lib.Mods,
}


def test_struct_layouts_match_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or not (HEADER_DIR / "clattn.h").exists():
        pytest.skip("needs a C compiler and the repository's include/clattn.h")
    lines = ['#include "clattn.h"', "#include <stddef.h>", "#include <stdio.h>",
             "int main(void) {", 'printf("{");']
    first = True
    for cname, cls in STRUCTS.items():
        for field, _ in cls._fields_:
            sep = "" if first else ","
            first = False
            lines.append(f'printf("{sep}\\"{cname}.{field}\\": %zu", '
                         f"offsetof({cname}, {field}));")
        lines.append(f'printf(",\\"{cname}.sizeof\\": %zu", sizeof({cname}));')
    lines += ['printf("}\\n");', "return 0; }"]
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=c11", f"-I{HEADER_DIR}", "-DCL_TARGET_OPENCL_VERSION=120",
                    str(src), "-o", str(exe)], check=True)
    c = json.loads(subprocess.run([str(exe)], check=True, capture_output=True,
                                  text=True).stdout)
    for cname, cls in STRUCTS.items():
        for field, _ in cls._fields_:
            assert getattr(cls, field).offset == c[f"{cname}.{field}"], f"{cname}.{field}"
        assert ctypes.sizeof(cls) == c[f"{cname}.sizeof"], f"sizeof({cname})"
    assert len(c) == sum(len(cls._fields_) + 1 for cls in STRUCTS.values())
