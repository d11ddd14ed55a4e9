"""Runs the README's bash and python blocks for tests/test_readme.py and
tests/test_readme_later.py, as a new user would type them (a python block as a
script of its own), except those marked ``<!-- docs-test: skip (reason) -->`` on
the line before the block (set-up, multi-host, runs of minutes).

The blocks run in two parts, one test file each, so that the two xdist workers
(``--dist loadfile``: a file on one worker) share them: the blocks before the heading
:data:`SECOND_PART` (tests/test_readme.py), and those from it on
(tests/test_readme_later.py).  Each part runs its blocks in order in one scratch folder
(files one block makes, such as a.csv, are there for the next), with ``.venv``,
``scripts`` and ``parties`` linked to this checkout's, and this checkout's package first on
PYTHONPATH.  The second part's blocks make the files they use (a block that used one of
the first part's files would fail there)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:^(<!--[^\n]*-->)\n)?^```(bash|python)\n(.*?)^```", re.M | re.S)
SECOND_PART = "### Python: one result type, in a training loop"


def readme_text():
    return (ROOT / "README.md").read_text()


def readme_blocks():
    """(line, marker, language, code) of every bash and python block, in order."""
    text = readme_text()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start(3)) + 1
        marker = m.group(1) or ""
        out.append((line, marker, m.group(2), m.group(3)))
    return out


def second_part_line():
    """The README line of the heading where the second part starts."""
    lines = readme_text().splitlines()
    assert lines.count(SECOND_PART) == 1, f"README heading {SECOND_PART!r} not found once"
    return lines.index(SECOND_PART) + 1


def runnable(part):
    """(line, language, code) of the unmarked blocks of part 1 or 2."""
    split = second_part_line()
    return [(line, lang, code) for line, marker, lang, code in readme_blocks()
            if not marker and (line < split) == (part == 1)]


def make_scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / ".venv").symlink_to(Path(sys.prefix))
    for name in ("scripts", "parties"):
        (d / name).symlink_to(ROOT / name)
    return d


def run_block(scratch, line, lang, code):
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


def part_tests(part):
    """The scratch fixture and the parametrized test of one part, for its test file to hold:
    ``scratch, test_readme_block_runs = part_tests(1)``."""
    blocks = runnable(part)

    @pytest.fixture(scope="module")
    def scratch(tmp_path_factory):
        return make_scratch(tmp_path_factory)

    @pytest.mark.parametrize("line, lang, code", blocks, ids=[f"README line {line}" for line, _, _ in blocks])
    def test_readme_block_runs(scratch, line, lang, code):
        run_block(scratch, line, lang, code)

    return scratch, test_readme_block_runs
