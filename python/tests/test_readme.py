"""The Python examples of README.md and docs/PYTHON.md run as written (so they cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example(capsys):
    if not README.exists():
        pytest.skip("needs the repository's README.md")
    text = README.read_text()
    section = text[text.index("## From Python"):]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "README's 'From Python' section has no python block"
    exec(compile(block.group(1), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "decode" in printed, f"the plan's reason should name the decode kernel: {printed!r}"


def test_python_md_pyopencl_example(capsys):
    """docs/PYTHON.md's PyOpenCL example runs as written (where pyopencl is installed)."""
    pytest.importorskip("pyopencl")
    doc = README.parent / "docs" / "PYTHON.md"
    if not doc.exists():
        pytest.skip("needs the repository's docs/PYTHON.md")
    section = doc.read_text().split("**PyOpenCL**", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "PYTHON.md's PyOpenCL paragraph has no python block"
    exec(compile(block.group(1), "PYTHON.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "(1, 8, 64, 32) (1, 8, 64)"
