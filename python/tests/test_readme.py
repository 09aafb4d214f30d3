"""The README's Python example runs as written (so it cannot rot)."""

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
