"""Deep Lake datasets (issue 23): ``caramba data import`` writes scikit-learn / npz data into a
Deep Lake dataset, ``source: deeplake`` reads it back batch by batch with the built-in source's
batches, bad fields are located ManifestErrors, damaged datasets are clear errors, and reading
streams (peak RSS measured in subprocesses)."""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.data import DataError, load_dataset
from caramba.errors import ConfigError

deeplake = pytest.importorskip("deeplake")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits_mlp.yml"


class Ran:
    """What `caramba ARGS` does: exit code and output; a CarambaError is what `caramba.cli.main`
    prints (``error: Kind: message``) with exit code 2."""

    def __init__(self, *args: str) -> None:
        from caramba.cli import app
        from caramba.errors import CarambaError

        res = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
        self.exit_code, self.output = res.exit_code, res.output
        if isinstance(res.exception, CarambaError):
            self.exit_code, self.output = 2, f"{res.output}error: {type(res.exception).__name__}: {res.exception}"
        elif res.exception is not None and not isinstance(res.exception, SystemExit):
            raise res.exception


def cli(*args: str) -> Ran:
    return Ran(*args)


def imported(tmp_path: Path, source: str = "sklearn:digits", name: str = "ds", *extra: str) -> Path:
    dest = tmp_path / name
    res = cli("data", "import", source, str(dest), *extra)
    assert res.exit_code == 0, res.output
    return dest


def digits_manifest(tmp_path: Path, dataset: str) -> Path:
    """examples/digits_mlp.yml with its dataset entry replaced by ``dataset`` (YAML, 4-space keys)."""
    text = DIGITS.read_text()
    block = re.search(r"^datasets:\n(?:    .*\n|  .*\n)+", text, re.M).group(0)
    path = tmp_path / "digits_deeplake.yml"
    path.write_text(text.replace(block, "datasets:\n  digits:\n" + textwrap.indent(dataset, "    ")))
    return path


# ---- import ---------------------------------------------------------------------------------


def test_import_writes_features_labels_split_and_metadata_and_refuses_to_overwrite(tmp_path):
    dest = imported(tmp_path, "sklearn:iris", "iris")
    ds = deeplake.open_read_only(str(dest))
    assert [c.name for c in ds.schema.columns] == ["x", "y", "split"] and len(ds) == 150
    assert ds.metadata["source"] == "sklearn:iris" and ds.metadata["classes"] == 3
    assert ds.metadata["written_by"] == "caramba data import" and ds.metadata["seed"] == 0
    split = ds["split"][0:150]
    assert split == ["train"] * 120 + ["test"] * 30  # train rows first, in the built-in split's order
    builtin = load_dataset("iris", {"source": "sklearn", "name": "iris"})
    np.testing.assert_array_equal(ds["x"][0:120], builtin.arrays("train")["x"])
    np.testing.assert_array_equal(ds["y"][120:150], builtin.arrays("test")["y"])
    assert (dest / "caramba_digests.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left

    again = cli("data", "import", "sklearn:iris", str(dest))
    assert again.exit_code == 2 and "already exists" in again.output and "--overwrite" in again.output
    assert len(deeplake.open_read_only(str(dest))) == 150  # untouched
    res = cli("data", "import", "sklearn:wine", str(dest), "--overwrite", "--split", "0.5,0.25,0.25", "--seed", "3")
    assert res.exit_code == 0, res.output
    assert "wrote 178 rows (train 89, val 44, test 45" in res.output
    ds = deeplake.open_read_only(str(dest))
    assert len(ds) == 178 and ds.metadata["source"] == "sklearn:wine" and ds.metadata["seed"] == 3
    wine = load_dataset("w", {"source": "deeplake", "path": str(dest)})
    assert (wine.size("train"), wine.size("val"), wine.size("test")) == (89, 44, 45)
    builtin = load_dataset("w", {"source": "sklearn", "name": "wine", "seed": 3,
                                 "split": {"train": 0.5, "val": 0.25, "test": 0.25}})
    for s in ("train", "val", "test"):
        got = np.concatenate([b["x"] for b in wine.eval_batches(s, 16)])
        np.testing.assert_array_equal(got, builtin.arrays(s)["x"])


def test_import_npz_with_named_arrays_and_its_errors(tmp_path):
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "a.npz", feats=rng.normal(size=(50, 3)).astype(np.float32), labels=np.arange(50) % 4)
    dest = imported(tmp_path, str(tmp_path / "a.npz"), "a", "--x", "feats", "--y", "labels")
    d = load_dataset("a", {"source": "deeplake", "path": str(dest)})
    assert d.fields["x"].dtype == np.float32 and d.fields["x"].shape == (3,) and d.info["classes"] == 4
    assert d.info["source"].endswith("a.npz") and d.size("train") == 40
    ref = load_dataset("a", {"source": "npz", "path": "a.npz", "fields": {"x": "feats", "y": "labels"}}, tmp_path)
    np.testing.assert_array_equal(next(d.eval_batches("test", 100))["y"], ref.arrays("test")["y"])
    only_x = imported(tmp_path, str(tmp_path / "a.npz"), "b", "--x", "feats", "--no-y")
    assert list(load_dataset("b", {"source": "deeplake", "path": str(only_x)}).fields) == ["x"]

    res = cli("data", "import", str(tmp_path / "a.npz"), str(tmp_path / "c"))
    assert res.exit_code == 2 and "a.npz has no array 'x'" in res.output and "--x" in res.output
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    res = cli("data", "import", str(tmp_path / "bad.npz"), str(tmp_path / "c"))
    assert res.exit_code == 2 and "not a readable .npz file" in res.output
    for source, message in (("sklearn:mnist", "not bundled"), ("foo.csv", "unknown import source"),
                            (str(tmp_path / "none.npz"), "does not exist")):
        res = cli("data", "import", source, str(tmp_path / "c"))
        assert res.exit_code == 2 and message in res.output, res.output
    for args, message in ((("--split", "0.5,0.5"), "three numbers"), (("--split", "0,0.5,0.5"), "train > 0"),
                          (("--seed", "-1"), "--seed must be")):
        res = cli("data", "import", "sklearn:iris", str(tmp_path / "c"), *args)
        assert res.exit_code == 2 and message in res.output, res.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    res = cli("data", "import", "sklearn:iris", str(tmp_path / "full"), "--overwrite")
    assert res.exit_code == 2 and "holds other files" in res.output
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
    res = cli("data", "import", "sklearn:iris", "mem://x")
    assert res.exit_code == 2 and "scheme 'mem://' is not supported" in res.output
    assert not (tmp_path / "c").exists()


# ---- reading ------------------------------------------------------------------------------


def test_digits_from_deeplake_gives_the_builtin_batches(tmp_path):
    dest = imported(tmp_path)
    builtin = load_dataset("digits", {"source": "sklearn", "name": "digits"})
    d = load_dataset("digits", {"source": "deeplake", "path": str(dest)})
    assert d.describe() == "digits: train 1438, test 359; fields x: float64[64], y: int64[]"
    assert d.info["classes"] == 10 and d.info["source"] == "sklearn:digits"
    a, b = builtin.train_batches(64, np.random.default_rng(7)), d.train_batches(64, np.random.default_rng(7))
    for _ in range(50):  # more than two epochs of 22 batches: the per-epoch permutations match too
        x, y = next(a), next(b)
        assert x.keys() >= y.keys() and all(np.array_equal(x[k], y[k]) and x[k].dtype == y[k].dtype for k in y)
    ea, eb = list(builtin.eval_batches("test", 100)), list(d.eval_batches("test", 100))
    assert [len(e["y"]) for e in eb] == [100, 100, 100, 59]
    assert all(np.array_equal(p["x"], q["x"]) for p, q in zip(ea, eb, strict=True))
    assert len(list(d.eval_batches("test", 100, limit=2))) == 2
    with pytest.raises(DataError, match="no 'val' examples"):
        next(d.eval_batches("val", 8))
    with pytest.raises(DataError, match="larger than the 1438 training examples"):
        next(d.train_batches(2000, np.random.default_rng(0)))

    copy = pickle.loads(pickle.dumps(d))  # a handle does not pickle: reopened on first read
    np.testing.assert_array_equal(next(copy.eval_batches("test", 5))["y"], eb[0]["y"][:5])

    f32 = load_dataset("digits", {"source": "deeplake", "path": str(dest), "dtype": {"pixels": "float32"},
                                  "columns": {"pixels": "x", "y": "y"}, "limit": 100})
    assert f32.fields["pixels"].dtype == np.float32 and f32.size("train") == 100 and f32.size("test") == 0
    batch = next(f32.eval_batches("train", 100))
    assert batch["pixels"].dtype == np.float32
    np.testing.assert_array_equal(batch["pixels"], builtin.arrays("train")["x"][:100].astype(np.float32))


def test_a_relative_path_is_the_manifests_folder_and_data_roots_apply(tmp_path):
    from caramba.data.sources import data_roots

    imported(tmp_path, "sklearn:iris", "iris")
    assert load_dataset("i", {"source": "deeplake", "path": "iris"}, tmp_path).size("train") == 120
    assert load_dataset("i", {"source": "deeplake", "path": f"file://{tmp_path / 'iris'}"}).size("test") == 30
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "iris")
    with data_roots([tmp_path / "root"]):
        for path in ("../iris", str(tmp_path / "iris"), "link", "s3://bucket/iris", "~/iris"):
            with pytest.raises(DataError, match="outside the folders this server reads data from"):
                load_dataset("i", {"source": "deeplake", "path": path}, tmp_path / "root")
    with data_roots([tmp_path]):
        assert load_dataset("i", {"source": "deeplake", "path": "iris"}, tmp_path).size("train") == 120


def test_a_manifest_with_a_deeplake_dataset_validates_and_binds(tmp_path):
    from caramba.manifest.compile import check

    dest = imported(tmp_path)
    prep, _ = check(digits_manifest(tmp_path, f"source: deeplake\npath: {dest.name}\nfeed: {{label: y}}\n"))
    assert prep.dims["batch"] == 64 and prep.feed == {"x": "x", "label": "y"}


@pytest.mark.slow
def test_the_digits_example_trains_from_deeplake_to_the_same_accuracy(tmp_path):
    """The issue's acceptance: a dataset written by `caramba data import sklearn:digits` trains
    examples/digits_mlp.yml to the same accuracy as the built-in source. The batches are identical
    (same split and seed), so the runs are too: measured test accuracy 0.97214 both (about 4 s each)."""
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    dest = imported(tmp_path)
    manifest = digits_manifest(tmp_path, f"source: deeplake\npath: {dest}\nfeed: {{label: y}}\n")
    runs = {}
    for label, path in (("builtin", DIGITS), ("deeplake", manifest)):
        res = run_experiment(path, store=RunStore(tmp_path / f"store-{label}"))
        assert res.ok, [r.error for r in res.runs]
        runs[label] = res.runs[0].summary
    assert runs["builtin"]["test.accuracy"] >= 0.95
    assert runs["deeplake"]["test.accuracy"] == runs["builtin"]["test.accuracy"]
    assert runs["deeplake"]["test.loss"] == runs["builtin"]["test.loss"]


# ---- streaming --------------------------------------------------------------------------

RSS_SCRIPT = """
import json, sys, time
import numpy as np
from caramba.data import load_dataset

mode, path = sys.argv[1], sys.argv[2]
ds = load_dataset("big", {"source": "deeplake", "path": path})


def peak():
    # VmHWM: this process's peak RSS (ru_maxrss would carry the forking parent's peak across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


if mode == "stream":
    it = ds.train_batches(64, np.random.default_rng(0))
    next(it)  # the first read sets up Deep Lake's reader
    base, t = peak(), time.perf_counter()
    n = ds.size("train") // 64
    for _ in range(n - 1):
        b = next(it)
        assert b["x"].shape == (64, 512)
    rows = sum(len(b["y"]) for b in ds.eval_batches("test", 64))
    out = {"batches": n, "test_rows": rows}
else:
    ds._read(ds.index["train"][:64])
    base, t = peak(), time.perf_counter()
    handle = ds._handle()
    x = handle["x"][0:len(handle)]
    out = {"bytes": int(x.nbytes)}
out.update(seconds=round(time.perf_counter() - t, 2), base=base, peak=peak(), delta=peak() - base)
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak RSS (VmHWM) from /proc")
def test_batches_stream_with_a_peak_rss_well_below_the_dataset(tmp_path):
    """60,000 rows x 512 float32 (123 MB; batch 64 x 937): one epoch of training batches plus the
    test split, read batch by batch, raises the process's peak RSS by about 22 MB (Deep Lake's
    chunk cache; 25 MB for twice the rows); reading the column whole raises it by about 238 MB
    (the array and Deep Lake's copy). Each in a fresh subprocess, after opening the dataset."""
    from caramba.data.deeplake import write_arrays

    n, width = 60_000, 512
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, width)).astype(np.float32)
    y = rng.integers(0, 10, n)
    dest = tmp_path / "big"
    write_arrays(str(dest), {"train": {"x": x[:54_000], "y": y[:54_000]}, "test": {"x": x[54_000:], "y": y[54_000:]}},
                 {"source": "test"})
    whole_bytes = x.nbytes
    del x
    assert n > 64 * 100
    script = tmp_path / "rss.py"
    script.write_text(RSS_SCRIPT)
    got = {}
    for mode in ("stream", "whole"):
        res = subprocess.run([sys.executable, str(script), mode, str(dest)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert res.returncode == 0, res.stderr[-2000:]
        got[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    print(json.dumps(got))
    assert got["stream"]["batches"] == 843 and got["stream"]["test_rows"] == 6000
    assert got["whole"]["bytes"] == whole_bytes
    assert got["whole"]["delta"] >= whole_bytes  # the measurement sees a whole read
    assert got["stream"]["delta"] < 0.3 * whole_bytes, got  # measured ~22 MB of 123 MB


# ---- errors -----------------------------------------------------------------------------


def test_missing_deeplake_package_is_a_config_error_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "deeplake", None)  # `import deeplake` raises ImportError
    with pytest.raises(ConfigError, match=re.escape("pip install 'caramba[deeplake]'")):
        load_dataset("d", {"source": "deeplake", "path": str(tmp_path)})
    res = cli("data", "import", "sklearn:iris", str(tmp_path / "x"))
    assert res.exit_code == 2 and "pip install 'caramba[deeplake]'" in res.output and "ConfigError" in res.output
    from caramba.manifest.compile import check

    with pytest.raises(ConfigError, match="deeplake package, which is not installed"):
        check(digits_manifest(tmp_path, "source: deeplake\npath: ds\nfeed: {label: y}\n"))


def _error_at(tmp_path: Path, dataset: str):
    from caramba.manifest import ManifestError
    from caramba.manifest.compile import prepare

    path = digits_manifest(tmp_path, dataset)
    with pytest.raises(ManifestError) as info:
        prepare(path)
    lines = path.read_text().splitlines()
    return info.value, lines[info.value.line - 1] if info.value.line else ""


@pytest.mark.parametrize("extra, key_line, message", [
    ("columns: {x: pixels, y: y}\n", "columns:", "has no column 'pixels' (field 'x')"),
    ("columns:\n  x: pixels\n", "x: pixels", "has no column 'pixels' (field 'x')"),
    ("columns:\n  x: split\n", "x: split", "has no column 'split' (field 'x')"),
    ("dtype:\n  x: int64\n", "x: int64", "holds float64; reading it as int64 would lose"),
    ("dtype:\n  y: uint8\n", "y: uint8", "holds int64; reading it as uint8 would lose"),
    ("dtype:\n  z: float32\n", "z: float32", "dtype names field 'z', which the dataset does not have"),
    ("dtype:\n  x: float8\n", "x: float8", "Input should be 'float16'"),
    ("split_column: part\n", "split_column: part", "has no split column 'part'"),
    ("split_column: y\n", "split_column: y", "split column 'y' holds int64, not text"),
    ("split: {train: 0.5, val: 0.0, test: 0.5}\n", "split:", "splits come from its split column"),
    ("seed: 3\n", "seed: 3", "rows keep their stored order"),
    ("limit: 0\n", "limit: 0", "greater than or equal to 1"),
    ("verify: 1\n", "verify: 1", "valid boolean"),
    ("colums: {x: x}\n", "colums:", "did you mean 'columns'"),
])
def test_bad_fields_are_manifest_errors_at_their_line(tmp_path, extra, key_line, message):
    dest = imported(tmp_path)
    err, line = _error_at(tmp_path, f"source: deeplake\npath: {dest}\nfeed: {{label: y}}\n{extra}")
    assert message in err.message, err
    assert line.strip().startswith(key_line), (line, str(err))


@pytest.mark.parametrize("path, message", [
    ("nowhere", "nowhere does not exist"),
    ("file.txt", "is a file, not a Deep Lake dataset folder"),
    ("empty", "is not a readable Deep Lake dataset"),
    ("mem://x", "path scheme 'mem://' is not supported"),
    ("s3:///x", "an s3 path needs a bucket"),
    ("''", "at least 1 character"),
])
def test_bad_paths_are_manifest_errors_at_the_path_line(tmp_path, path, message):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    err, line = _error_at(tmp_path, f"source: deeplake\npath: {path}\nfeed: {{label: y}}\n")
    assert message in err.message and line.strip().startswith("path:"), (line, str(err))
    assert "Traceback" not in str(err)


def _dataset(path: Path, columns: dict, split: list[str]) -> None:
    from deeplake import types

    ds = deeplake.create(str(path))
    for name, (kind, _) in columns.items():
        ds.add_column(name, kind(types))
    ds.add_column("split", types.Text())
    ds.append({**{k: v for k, (_, v) in columns.items()}, "split": split})
    ds.commit()


def test_datasets_written_by_others_bad_split_values_and_columns_that_are_not_numbers(tmp_path):
    _dataset(tmp_path / "ok", {"emb": (lambda t: t.Embedding(4), np.ones((4, 4), np.float32)),
                               "label": (lambda t: t.ClassLabel(t.Int32()), np.arange(4, dtype=np.int32)),
                               "note": (lambda t: t.Text(), ["a", "b", "c", "d"])}, ["train", "train", "val", "test"])
    d = load_dataset("o", {"source": "deeplake", "path": str(tmp_path / "ok")})  # no digests: not verified
    assert list(d.fields) == ["emb", "label"] and d.fields["emb"].shape == (4,) and d.size("val") == 1
    assert "classes" not in d.info
    with pytest.raises(DataError, match=r"column 'note' \(field 'n'\) holds text, not numbers"):
        load_dataset("o", {"source": "deeplake", "path": str(tmp_path / "ok"), "columns": {"n": "note"}})
    _dataset(tmp_path / "var", {"a": (lambda t: t.Array(t.Float32(), dimensions=1), [np.ones(2, np.float32),
                                                                                   np.ones(3, np.float32)])},
             ["train", "test"])
    with pytest.raises(DataError, match="has no fixed shape"):
        load_dataset("v", {"source": "deeplake", "path": str(tmp_path / "var")})
    _dataset(tmp_path / "dev", {"a": (lambda t: t.Float32(), np.ones(3, np.float32))}, ["train", "dev", "test"])
    with pytest.raises(DataError, match="row 1 of split column 'split' is 'dev'; each row must be train, val or test"):
        load_dataset("d", {"source": "deeplake", "path": str(tmp_path / "dev")})
    _dataset(tmp_path / "notrain", {"a": (lambda t: t.Float32(), np.ones(2, np.float32))}, ["test", "test"])
    with pytest.raises(DataError, match="no 'train' examples"):
        next(load_dataset("n", {"source": "deeplake", "path": str(tmp_path / "notrain")})
             .train_batches(1, np.random.default_rng(0)))
    empty = deeplake.create(str(tmp_path / "empty"))
    empty.add_column("split", deeplake.types.Text())
    empty.commit()
    with pytest.raises(DataError, match="has no rows"):
        load_dataset("e", {"source": "deeplake", "path": str(tmp_path / "empty")})


def _chunk_files(dest: Path) -> list[Path]:
    return sorted((p for p in dest.rglob("*") if p.is_file() and "_deeplake_log" not in p.parts
                   and p.name != "caramba_digests.json"), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("damage, message", [
    ("truncate", "bytes, not the"),  # Deep Lake alone reads a truncated chunk as zeros
    ("garble", "the contents of its file"),  # ... and can crash the process on a garbled one
    ("delete", "is missing"),
    ("symlink", "is now a symbolic link"),
    ("digests", "is not a digest list caramba wrote"),
    ("log", "is not a readable Deep Lake dataset"),
    ("wipe", "is missing"),
    ("wipe-unverified", "is not a readable Deep Lake dataset"),
])
def test_a_damaged_dataset_is_a_clear_error_not_zeros_or_a_crash(tmp_path, damage, message):
    dest = imported(tmp_path, "sklearn:iris", "iris")
    chunks = _chunk_files(dest)
    if damage == "truncate":
        data = chunks[-1].read_bytes()
        chunks[-1].write_bytes(data[: len(data) // 2])
    elif damage == "garble":
        data = bytearray(chunks[0].read_bytes())
        data[len(data) // 2] ^= 0xFF
        chunks[0].write_bytes(bytes(data))
    elif damage == "delete":
        chunks[0].unlink()
    elif damage == "symlink":
        (tmp_path / "elsewhere").write_bytes(chunks[0].read_bytes())
        chunks[0].unlink()
        chunks[0].symlink_to(tmp_path / "elsewhere")
    elif damage == "digests":
        (dest / "caramba_digests.json").write_text('{"files": {"../../etc/passwd": {"size": 1, "sha256": "0"}}}')
    elif damage == "log":
        for p in (dest / "_deeplake_log").rglob("*"):
            if p.is_file():
                p.write_bytes(b"")
        (dest / "caramba_digests.json").unlink()
    else:
        if damage == "wipe-unverified":
            (dest / "caramba_digests.json").unlink()
        for p in list(dest.iterdir()):
            if p.is_dir():
                import shutil

                shutil.rmtree(p)
    with pytest.raises(DataError, match=re.escape(message)) as info:
        load_dataset("iris", {"source": "deeplake", "path": str(dest)})
    assert info.value.key == ("path",)
    if damage in ("truncate", "garble", "delete", "symlink", "wipe"):
        assert "verify: false" in info.value.hint


def test_verify_false_skips_the_digest_check(tmp_path):
    dest = imported(tmp_path, "sklearn:iris", "iris")
    (dest / "caramba_digests.json").write_text(json.dumps({"version": 1, "files": {"x": {"size": 1, "sha256": "0"}}}))
    with pytest.raises(DataError, match="its file x is missing"):
        load_dataset("iris", {"source": "deeplake", "path": str(dest)})
    assert load_dataset("iris", {"source": "deeplake", "path": str(dest), "verify": False}).size("train") == 120


# ---- fuzz -------------------------------------------------------------------------------

VALUES = [None, 0, -1, 2**70, 1.5, float("nan"), True, "", "x", "float32", "../..", "/etc/passwd", "s3://", "mem://m",
          "\x00", "é" * 300, [], ["x"], {}, {"x": 1}, {"1x": "x"}, {"x": None}]
# per key, values that work (with the digits dataset) and a few that do not
GOOD = {"columns": [{"x": "x", "y": "y"}, {"x": "x", "label": "y"}, {"x": "y"}, {"x": "pixels"}],
        "split_column": ["split", "y", "x", "part"], "dtype": [{"x": "float32"}, {"y": "int32"}, {"x": "int8"},
                                                              {"x": "float8"}, {"q": "float32"}],
        "feed": [{"label": "y"}, {"label": "x"}, {"x": "y"}, {"nope": "y"}], "limit": [100, 1500, 10, 2**63],
        "verify": [True, False, "yes"], "path": ["ds", "nowhere", "s3:///k"], "split": [{"train": 1.0}],
        "seed": [0], "source": ["deeplake", "deeplak", "npz"], "extra": [1]}
KEYS = list(GOOD)


def test_mutated_deeplake_fields_give_manifest_errors_never_tracebacks(tmp_path):
    """Random values in the new fields (and a few wrong keys): every outcome is a binding that works
    or one located ManifestError."""
    from caramba.manifest import ManifestError
    from caramba.manifest.compile import prepare
    from caramba.manifest.loader import dump_yaml

    dest = imported(tmp_path)
    rng = random.Random(23)
    outcomes = {"ok": 0, "error": 0}
    for i in range(80):
        entry = {"source": "deeplake", "path": str(dest), "feed": {"label": "y"}}
        for _ in range(rng.randint(1, 2)):
            key = rng.choice(KEYS)
            entry[key] = rng.choice(GOOD[key] if rng.random() < 0.6 else VALUES)
        path = digits_manifest(tmp_path, dump_yaml(entry))
        try:
            prepare(path)
            outcomes["ok"] += 1
        except ManifestError as exc:
            assert exc.line is not None and exc.message, (i, entry)
            assert "Traceback" not in str(exc)
            outcomes["error"] += 1
            if os.environ.get("SHOW_FUZZ"):
                print(entry, "->", str(exc).splitlines()[0][-160:])
    assert outcomes["ok"] >= 5 and outcomes["error"] >= 20, outcomes


# ---- S3 (moto's server on loopback) -----------------------------------------------------


@pytest.fixture
def s3(tmp_path, monkeypatch):
    import secrets
    import socket

    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    for k, v in (("AWS_ENDPOINT_URL", url), ("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    bucket = f"data-{secrets.token_hex(4)}"
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    try:
        yield bucket, client
    finally:
        server.stop()


@pytest.mark.slow  # starting moto's server takes 2-3 s of the ~6
def test_import_to_and_read_from_s3(s3):
    bucket, client = s3
    res = cli("data", "import", "sklearn:iris", f"s3://{bucket}/sets/iris")
    assert res.exit_code == 0, res.output
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys and all(k.startswith("sets/iris/") for k in keys)
    d = load_dataset("iris", {"source": "deeplake", "path": f"s3://{bucket}/sets/iris/"})
    builtin = load_dataset("iris", {"source": "sklearn", "name": "iris"})
    a, b = builtin.train_batches(16, np.random.default_rng(1)), d.train_batches(16, np.random.default_rng(1))
    for _ in range(10):
        x, y = next(a), next(b)
        assert np.array_equal(x["x"], y["x"]) and np.array_equal(x["y"], y["y"])
    again = cli("data", "import", "sklearn:iris", f"s3://{bucket}/sets/iris")
    assert again.exit_code == 2 and "already exists" in again.output
    assert cli("data", "import", "sklearn:wine", f"s3://{bucket}/sets/iris", "--overwrite").exit_code == 0
    assert load_dataset("w", {"source": "deeplake", "path": f"s3://{bucket}/sets/iris"}).size("test") == 36
    with pytest.raises(DataError, match="is not a readable Deep Lake dataset"):
        load_dataset("n", {"source": "deeplake", "path": f"s3://{bucket}/nothing"})


def test_an_unreachable_s3_endpoint_is_one_quick_error_naming_it(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with pytest.raises(DataError, match=re.escape(f"cannot reach the S3 endpoint http://127.0.0.1:{port}")) as info:
        load_dataset("d", {"source": "deeplake", "path": "s3://bucket/d"})
    assert info.value.key == ("path",)
    res = cli("data", "import", "sklearn:iris", "s3://bucket/d")
    assert res.exit_code == 2 and f"cannot reach the S3 endpoint http://127.0.0.1:{port}" in res.output
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://example")
    with pytest.raises(DataError, match="is not an http"):
        load_dataset("d", {"source": "deeplake", "path": "s3://bucket/d"})
