"""Data roots: inside ``data_roots(...)`` a dataset file is read only when its real path lies
under a root; every refused path gets the same message. Bad options are DataErrors."""

from __future__ import annotations

import numpy as np
import pytest

from caramba.data import DataError, load_dataset
from caramba.data.sources import MAX_GENERATED_VALUES, data_roots, outside_roots


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    (r / "ok.csv").write_text("a,y\n" + "".join(f"{i},{i % 2}\n" for i in range(20)))
    (r / "out.csv").symlink_to(tmp_path / "secret.csv")
    (tmp_path / "secret.csv").write_text("a,y\n1,0\n2,1\n")
    (r / "loop").symlink_to(r / "loop")
    return r


def test_files_under_the_roots_are_read(root):
    with data_roots([root]):
        assert load_dataset("d", {"source": "csv", "path": "ok.csv"}, root).size("train") == 16
        assert load_dataset("d", {"source": "csv", "path": str(root / "ok.csv")}, "/").size("train") == 16


@pytest.mark.parametrize("path", ["out.csv", "../secret.csv", "/etc/passwd", "/proc/self/environ", "~/x.csv",
                                  "/dev/null", "sub/../../secret.csv", "", "a\x00b", "loop"])
def test_paths_out_of_the_roots_get_one_message(root, path):
    with data_roots([root]), pytest.raises(DataError) as exc:
        load_dataset("d", {"source": "text", "path": path}, root)
    assert exc.value.message == "dataset 'd': its path is outside the folders this server reads data from" or (
        path == "loop" and "does not exist" in exc.value.message)


def test_system_folders_are_refused_even_under_a_root(tmp_path):
    with data_roots(["/"]):
        assert outside_roots(tmp_path, "/proc/self/environ") and outside_roots(tmp_path, "/sys/kernel")
        assert not outside_roots(tmp_path, "/etc/hostname")
    assert not outside_roots(tmp_path, "/proc/self/environ")  # no roots in force: the command line's rules


def test_options_are_checked_before_any_work():
    gen = {"source": "generated", "kind": "blobs", "n": 64}
    with pytest.raises(DataError, match="seed must be an integer from 0"):
        load_dataset("d", {**gen, "seed": -1})
    with pytest.raises(DataError, match="split fractions"):
        load_dataset("d", {**gen, "split": {"train": float("nan"), "val": 0.0, "test": 0.0}})
    with pytest.raises(DataError, match="noise must be a finite number"):
        load_dataset("d", {**gen, "noise": float("inf")})
    with pytest.raises(DataError, match=f"over the limit of {MAX_GENERATED_VALUES:,}"):
        load_dataset("d", {**gen, "n": MAX_GENERATED_VALUES})
    with pytest.raises(DataError, match="delimiter must be one character"):
        load_dataset("d", {"source": "csv", "path": "missing.csv", "delimiter": ""})


def test_csv_rows_of_other_lengths_labels_and_non_finite_values_are_named(tmp_path):
    (tmp_path / "r.csv").write_text("a,y\n1,0\n2\n")
    with pytest.raises(DataError, match="row 3 has 1 columns, the first row 2"):
        load_dataset("d", {"source": "csv", "path": "r.csv"}, tmp_path)
    (tmp_path / "n.csv").write_text("a,y\n1,0\nnan,1\n")
    with pytest.raises(DataError, match="row 3, column 1 is not a finite number"):
        load_dataset("d", {"source": "csv", "path": "n.csv"}, tmp_path)
    (tmp_path / "l.csv").write_text("a,y\n1,0.5\n2,1\n")
    with pytest.raises(DataError, match="class indices"):
        load_dataset("d", {"source": "csv", "path": "l.csv"}, tmp_path)
    d = load_dataset("d", {"source": "csv", "path": "l.csv", "target_dtype": "float64"}, tmp_path)
    assert d.fields["y"].dtype == np.float64
