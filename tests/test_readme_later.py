"""The README's runnable blocks from the heading ``readme_blocks.SECOND_PART`` on, in order, in a
scratch folder of their own (tests/test_readme.py runs those before it; see tests/readme_blocks.py)."""

import pytest

from readme_blocks import make_scratch, run_block, runnable


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return make_scratch(tmp_path_factory)


RUNNABLE = runnable(2)


@pytest.mark.parametrize("line, lang, code", RUNNABLE, ids=[f"README line {line}" for line, _, _ in RUNNABLE])
def test_readme_block_runs(scratch, line, lang, code):
    run_block(scratch, line, lang, code)
