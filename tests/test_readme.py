"""Every bash and python block of the README runs, as a new user would type it (a python block
as a script of its own), except those marked
``<!-- docs-test: skip (reason) -->`` on the line before the block (set-up, multi-host, runs of
minutes).  The blocks run in order in one scratch folder (files one block makes, such as
a.csv, are there for the next), with ``.venv``, ``scripts`` and ``parties`` linked to this
checkout's, and this checkout's package first on PYTHONPATH."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:^(<!--[^\n]*-->)\n)?^```(bash|python)\n(.*?)^```", re.M | re.S)


def readme_blocks():
    text = (ROOT / "README.md").read_text()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start(3)) + 1
        marker = m.group(1) or ""
        out.append((line, marker, m.group(2), m.group(3)))
    return out


def test_every_skipped_block_says_why():
    blocks = readme_blocks()
    assert len(blocks) >= 8
    for line, marker, _, _ in blocks:
        if marker:
            assert re.fullmatch(r"<!-- docs-test: skip \(.+\) -->", marker), (line, marker)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / ".venv").symlink_to(Path(sys.prefix))
    for name in ("scripts", "parties"):
        (d / name).symlink_to(ROOT / name)
    return d


RUNNABLE = [(line, lang, code) for line, marker, lang, code in readme_blocks() if not marker]


@pytest.mark.parametrize("line, lang, code", RUNNABLE, ids=[f"README line {line}" for line, _, _ in RUNNABLE])
def test_readme_block_runs(scratch, line, lang, code):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    if lang == "python":
        script = scratch / f"readme_line_{line}.py"
        script.write_text(code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    res = subprocess.run(command, cwd=scratch, env=env, capture_output=True,
                         text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"README line {line}:\n{code}\nstdout:\n{res.stdout[-2000:]}\nstderr:\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
