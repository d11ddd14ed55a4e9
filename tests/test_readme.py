"""Every bash and python block of the README runs, as a new user would type it, except those
marked ``<!-- docs-test: skip (reason) -->``: this file runs the blocks before the heading
``readme_blocks.SECOND_PART``, tests/test_readme_later.py the rest (see tests/readme_blocks.py)."""

import re


from readme_blocks import part_tests, readme_blocks, runnable, second_part_line


def test_every_skipped_block_says_why():
    blocks = readme_blocks()
    assert len(blocks) >= 8
    for line, marker, _, _ in blocks:
        if marker:
            assert re.fullmatch(r"<!-- docs-test: skip \(.+\) -->", marker), (line, marker)


def test_both_parts_run_blocks_and_together_every_unmarked_block():
    first, second = runnable(1), runnable(2)
    assert first and second and first[-1][0] < second_part_line() < second[0][0]
    assert len(first) + len(second) == sum(1 for _, marker, _, _ in readme_blocks() if not marker)


scratch, test_readme_block_runs = part_tests(1)
