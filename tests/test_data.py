import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc import InputError
from secure_auc.data import (
    CRITEO_SMALL,
    make_ctr_dataset,
    partition_indices,
    partition_owner,
    read_client_csv,
    write_client_csv,
)


def test_default_dataset_matches_paper_counts():
    scores, labels = make_ctr_dataset()
    assert len(scores) == CRITEO_SMALL.samples == 458_407
    assert int(labels.sum()) == 117_317
    assert len(labels) - int(labels.sum()) == 341_090
    assert abs(roc_auc_score(labels, scores) - 0.7494) < 0.005
    s2, l2 = make_ctr_dataset()
    np.testing.assert_array_equal(scores, s2)
    np.testing.assert_array_equal(labels, l2)


def test_generator_is_configurable():
    scores, labels = make_ctr_dataset(50_000, base_rate=0.05, auc=0.9, seed=7)
    assert len(scores) == 50_000 and int(labels.sum()) == 2500
    assert abs(roc_auc_score(labels, scores) - 0.9) < 0.01
    other, _ = make_ctr_dataset(50_000, base_rate=0.05, auc=0.9, seed=8)
    assert not np.array_equal(scores, other)


@pytest.mark.parametrize("scheme", ["iid", "noniid"])
@pytest.mark.parametrize("k", [1, 3, 10, 997])
def test_partitions_cover_every_sample_once(scheme, k):
    scores = np.random.default_rng(0).random(1000)
    parts = partition_indices(scores, k, scheme, seed=1)
    assert len(parts) == k
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(1000))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    owner = partition_owner(scores, k, scheme, seed=1)
    for c, p in enumerate(parts):
        assert (owner[p] == c).all()
    if scheme == "noniid":
        # consecutive score bands
        for a, b in zip(parts, parts[1:]):
            assert scores[a].max() <= scores[b].min()


def test_csv_round_trip_keeps_full_precision(tmp_path):
    s = np.array([0.1, 1 / 3, np.nextafter(1 / 3, 1), -0.0])
    y = np.array([1, 0, 1, 0])
    path = tmp_path / "c.csv"
    write_client_csv(path, s, y)
    d = read_client_csv(path)
    np.testing.assert_array_equal(d.scores, s)
    np.testing.assert_array_equal(d.labels, y)


def test_csv_extra_columns_and_boolean_labels(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,label,score,other\n7,true,0.5,x\n8,False,0.25,y\n\n9,1,0.125,z\n")
    d = read_client_csv(path)
    np.testing.assert_array_equal(d.scores, [0.5, 0.25, 0.125])
    np.testing.assert_array_equal(d.labels, [1, 0, 1])


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "file is empty"),
        ("score,label\n", "no data rows"),
        ("score,lab\n0.1,1\n", "missing column.*'label'"),
        ("value,label\n0.1,1\n", "missing column.*'score'"),
        ("score,label\n0.1,1\nnan,0\n", r"row 2 \(line 3\), column 'score': 'nan' is not finite"),
        ("score,label\n0.1,1\n-inf,0\n", r"row 2 \(line 3\), column 'score'"),
        ("score,label\nabc,1\n", r"row 1 \(line 2\), column 'score': 'abc' is not a number"),
        ("score,label\n0.1,2\n", r"row 1 \(line 2\), column 'label': '2'"),
        ("score,label\n0.1,yes\n", r"column 'label': 'yes'"),
        ("score,label\n0.1\n", r"row 1 \(line 2\): has 1 fields"),
    ],
)
def test_csv_errors_name_file_row_column(tmp_path, text, match):
    path = tmp_path / "client.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match) as err:
        read_client_csv(path)
    assert "client.csv" in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot open"):
        read_client_csv(tmp_path / "nope.csv")
