"""Datasets without network: bundled scikit-learn data, generators, local files."""

import importlib.util

import numpy as np
import pytest

from caramba.data import DataError, load_dataset, unify_dims


def test_digits_are_real_held_out_data_with_a_fixed_split():
    if importlib.util.find_spec("sklearn") is None:  # importing sklearn itself takes seconds; only its files are read
        pytest.skip("scikit-learn is not installed (pip install 'caramba[data]')")
    d = load_dataset("digits", {"source": "sklearn", "name": "digits", "split": {"train": 0.8, "val": 0.0, "test": 0.2}})
    assert d.size("train") + d.size("test") == 1797 and d.size("val") == 0 and d.splits == ("train", "test")
    assert d.fields["x"].shape == (64,) and d.fields["image"].shape == (1, 8, 8) and d.info["classes"] == 10
    x = d.arrays("test")["x"]
    assert 0.0 <= x.min() and x.max() <= 1.0
    again = load_dataset("digits", {"source": "sklearn", "name": "digits"})
    np.testing.assert_array_equal(again.arrays("test")["y"], d.arrays("test")["y"])
    train_rows = {r.tobytes() for r in d.arrays("train")["x"]}
    assert sum(r.tobytes() in train_rows for r in x) < 0.05 * len(x)  # a few duplicate images exist in digits


@pytest.mark.parametrize("name, n, classes", [("iris", 150, 3), ("wine", 178, 3), ("breast_cancer", 569, 2)])
def test_other_bundled_sets(name, n, classes):
    if importlib.util.find_spec("sklearn") is None:  # importing sklearn itself takes seconds; only its files are read
        pytest.skip("scikit-learn is not installed (pip install 'caramba[data]')")
    d = load_dataset(name, {"source": "sklearn", "name": name})
    assert d.size("train") + d.size("test") == n and d.info["classes"] == classes
    assert abs(d.arrays("train")["x"].mean()) < 0.3  # standardized


def test_training_batches_are_exact_size_and_eval_covers_the_split():
    d = load_dataset("b", {"source": "generated", "kind": "blobs", "n": 103, "features": 3, "classes": 4})
    it = d.train_batches(16, np.random.default_rng(0))
    for _ in range(10):
        b = next(it)
        assert b["x"].shape == (16, 3) and b["y"].shape == (16,) and b["y"].dtype == np.int64
    sizes = [len(b["y"]) for b in d.eval_batches("test", 8)]
    assert sum(sizes) == d.size("test") and sizes[-1] <= 8
    assert len(list(d.eval_batches("test", 8, limit=2))) == 2
    with pytest.raises(DataError, match="larger than the"):
        next(d.train_batches(1000, np.random.default_rng(0)))
    with pytest.raises(DataError, match="no 'val' examples"):
        next(d.eval_batches("val", 8))


@pytest.mark.parametrize("kind", ["blobs", "spirals", "xor", "regression", "tones"])
def test_generated_kinds(kind):
    d = load_dataset("g", {"source": "generated", "kind": kind, "n": 50, "features": 3, "classes": 3, "length": 64})
    assert d.size("train") == 40
    if kind == "tones":
        assert d.fields["wave"].shape == (1, 64)


def test_npz_and_csv_files(tmp_path):
    np.savez(tmp_path / "a.npz", feats=np.arange(40.0).reshape(20, 2), labels=np.arange(20) % 2)
    d = load_dataset("n", {"source": "npz", "path": "a.npz", "fields": {"x": "feats", "y": "labels"}}, tmp_path)
    assert d.fields["x"].shape == (2,) and d.info["classes"] == 2
    with pytest.raises(DataError, match="no array 'labelz'; did you mean 'labels'"):
        load_dataset("n", {"source": "npz", "path": "a.npz", "fields": {"y": "labelz"}}, tmp_path)
    (tmp_path / "t.csv").write_text("a,b,label\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(30)))
    c = load_dataset("c", {"source": "csv", "path": "t.csv", "target": "label"}, tmp_path)
    assert c.fields["x"].shape == (2,) and c.info["classes"] == 3
    with pytest.raises(DataError, match="no column 'lable'"):
        load_dataset("c", {"source": "csv", "path": "t.csv", "target": "lable"}, tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("c", {"source": "csv", "path": "missing.csv"}, tmp_path)


def test_text_windows_are_shifted_by_one_and_baseline_is_the_unigram_loss(tmp_path):
    text = "abcabcabd" * 200
    (tmp_path / "c.txt").write_text(text)
    d = load_dataset("t", {"source": "text", "path": "c.txt", "context": 8,
                           "split": {"train": 0.9, "val": 0.1, "test": 0.0}}, tmp_path)
    assert d.info["vocab_size"] == 4 and d.vocab == ["a", "b", "c", "d"]
    b = next(d.train_batches(5, np.random.default_rng(1)))
    assert b["x"].shape == (5, 8)
    np.testing.assert_array_equal(b["x"][:, 1:], b["y"][:, :-1])
    assert d.decode(b["x"][0])[:1] in "abcd"
    ev = list(d.eval_batches("val", 4))
    assert sum(len(e["x"]) for e in ev) == d.size("val") == (180 - 1) // 8
    p = np.array([3, 3, 2, 1]) / 9  # a, b, c, d per 9 characters
    assert abs(d.info["unigram_val_loss"] - float(-(p * np.log(p)).sum())) < 0.02
    with pytest.raises(DataError, match="more than vocab_size 3"):
        load_dataset("t", {"source": "text", "path": "c.txt", "vocab_size": 3}, tmp_path)


def test_unify_dims_binds_symbols_and_names_mismatches():
    dims = unify_dims({"x": ["batch", "seq"], "y": ["batch", "seq"]}, {"x": (4, 16), "y": (4, 16)}, {"batch": 4})
    assert dims == {"batch": 4, "seq": 16}
    with pytest.raises(DataError, match="input 'y': dimension 'seq' is 16 elsewhere but the data gives 8"):
        unify_dims({"x": ["batch", "seq"], "y": ["batch", "seq"]}, {"x": (4, 16), "y": (4, 8)})
    with pytest.raises(DataError, match=r"input 'x' is declared \['batch', 64\] but the data gives shape \[4, 63\]"):
        unify_dims({"x": ["batch", 64]}, {"x": (4, 63)})


def test_bundled_and_simulated_data_are_made_once_per_process_and_each_dataset_owns_its_arrays():
    from caramba.data import sources

    hawkes = {"source": "hawkes", "mu": [0.4, 0.2], "alpha": [[[0.3], [0.1]], [[0.2], [0.3]]],
              "beta": [[[2.0], [2.0]], [[2.0], [2.0]]], "n": 4, "events": 50, "seed": 11}
    for spec, cached in (({"source": "sklearn", "name": "digits"}, sources._sklearn_table),
                         ({"source": "sklearn", "name": "iris", "scale": False}, sources._sklearn_table),
                         (hawkes, sources._hawkes_sequences)):
        cached.cache_clear()
        a, b = load_dataset("d", spec), load_dataset("d", spec)
        assert cached.cache_info().hits == 1 and cached.cache_info().misses == 1
        for split in ("train", "test"):
            for k, v in a.arrays(split).items():
                assert v.flags.writeable and not np.shares_memory(v, b.arrays(split)[k])
                np.testing.assert_array_equal(v, b.arrays(split)[k])
                v[...] = 0  # a dataset's arrays are its own: the next load is unchanged
        c = load_dataset("d", spec)
        np.testing.assert_array_equal(c.arrays("train")[next(iter(c.fields))], b.arrays("train")[next(iter(b.fields))])
    other = load_dataset("d", dict(hawkes, seed=12))  # other parameters: simulated anew
    assert sources._hawkes_sequences.cache_info().misses == 2
    assert not np.array_equal(other.arrays("train")["times"], b.arrays("train")["times"])
