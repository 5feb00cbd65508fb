"""Every fenced ```python block in README.md and docs/*.md runs as written.

The blocks of one file run in order in one namespace (a page may build on its earlier blocks),
in a fresh process whose working folder is a temporary one holding a link to ``examples/`` and
whose run store is temporary: a snippet may train, save and read files without touching the
checkout or the user's store. A block that cannot run on its own is a defect of the docs: give
it what it needs (the bundled checkpoints in examples/checkpoints, generated data) or write it
as text, not as a python block.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
RUNNER = r"""
import __main__, json, sys, traceback
blocks = json.loads(sys.stdin.read())
ns = __main__.__dict__  # as a script runs: classes defined in a block live in __main__ (actors look them up there)
for line, code in blocks:
    try:
        exec(compile(code, f"{sys.argv[1]}:{line}", "exec"), ns)
    except BaseException:
        print(f"the block at {sys.argv[1]}:{line} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def blocks(page: Path) -> list[tuple[int, str]]:
    text = page.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in BLOCK.finditer(text)]


PAGES_WITH_CODE = [p for p in PAGES if blocks(p)]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[p.relative_to(ROOT).as_posix() for p in PAGES_WITH_CODE])
def test_every_python_block_runs(page, tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "CARAMBA_STORE": str(tmp_path / "store"), "PYTHONPATH": str(ROOT / "src")}
    rel = page.relative_to(ROOT).as_posix()
    p = subprocess.run([sys.executable, "-c", RUNNER, rel], input=json.dumps(blocks(page)), capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]


def test_the_collector_finds_blocks():
    assert blocks(ROOT / "README.md"), "README.md's tour has a python block"
