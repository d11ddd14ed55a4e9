import pytest


@pytest.fixture(scope="session")
def small_dataset():
    from secure_auc.data import make_ctr_dataset

    return make_ctr_dataset(20_000, seed=3)
