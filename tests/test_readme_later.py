"""The README's runnable blocks from the heading ``readme_blocks.SECOND_PART`` on, in order, in a
scratch folder of their own (tests/test_readme.py runs those before it; see tests/readme_blocks.py)."""

from readme_blocks import part_tests

scratch, test_readme_block_runs = part_tests(2)
