import pytest


@pytest.fixture(scope="session")
def small_dataset():
    from secure_auc.data import make_ctr_dataset

    return make_ctr_dataset(20_000, seed=3)


# The longest test files, longest first (seconds on an idle 2-core machine, each file on one
# of the two xdist workers).  With ``--dist loadfile --no-loadscope-reorder`` (pyproject.toml)
# xdist hands out files in this order, so the long ones start first and the short ones
# fill the tail (longest-first scheduling); the suite's wall time is the slower worker's.
# A file missing here only runs later; the order never changes what a test checks.
LONGEST_FIRST = [  # seconds of a whole run on 2 loaded cores (load average 6 to 10), the MPC launches merged since
    "tests/mpc/test_launch.py",  # ~330 s
    "tests/test_accountant.py",  # ~250 s
    "tests/test_readme.py",  # ~135 s (the main job runs in scripts/setup.sh)
    "tests/test_distributed.py",  # ~135 s
    "tests/mpc/test_crypten_owners.py",  # ~125 s
    "tests/mpc/test_links.py",  # ~115 s
    "tests/test_readme_later.py",  # ~115 s
    "tests/test_coverage.py",  # ~80 s
    "tests/mpc/test_process_faults.py",  # ~75 s
    "tests/mpc/test_leakage.py",  # ~60 s
    "tests/mpc/test_ranks.py",  # ~60 s
    "tests/mpc/test_crypten_safe.py",  # ~60 s
    "tests/mpc/test_input_parties.py",  # ~60 s
    "tests/test_streams.py",  # ~50 s
    "tests/test_error_bars.py",  # ~50 s
    "tests/mpc/test_deploy.py",  # ~50 s
    "tests/test_simulation.py",  # ~45 s
    "tests/test_compare.py",  # ~45 s
    "tests/test_cli_holes.py",  # ~45 s
    "tests/test_ledger_holes.py",  # ~45 s
    "tests/mpc/test_services.py",  # ~40 s
    "tests/mpc/test_crypten_bridge.py",  # ~35 s
    "tests/mpc/test_report_deploy.py",
    "tests/mpc/test_rank_rounds.py",
    "tests/mpc/test_service_stops.py",
    "tests/mpc/test_crypten_example.py",
    "tests/mpc/test_report_clients_layout.py",
    "tests/mpc/test_deploy_faults.py",
    "tests/mpc/test_attack_matrix.py",
    "tests/mpc/test_stop_signals.py",
    "tests/test_dp.py",  # ~30 s
    "tests/mpc/test_opening.py",  # ~22 s
]


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def key(item):
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else str(item.path)
        return rank.get(path, len(rank))
    items.sort(key=key)  # stable: tests keep their order within a file, other files theirs


def pytest_configure(config):
    """Compile the rank step's kernels and the intervals' pass into the user's cache once, before any test (and
    before xdist's workers start): on a machine whose cache is cold (a fresh CI runner),
    the first compile takes 6 to 10 CPU s, and a party started by hand (``secure-auc
    party``, a deployed service) would otherwise spend it inside a test's start-up timeout.
    With a warm cache this loads the kernels (about 1 s)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    from secure_auc import interval_kernels
    from secure_auc.mpc import kernels

    kernels.warm_up()
    interval_kernels.warm_up()  # many intervals at once (tests/test_coverage.py, tests/test_interval_kernels.py)
