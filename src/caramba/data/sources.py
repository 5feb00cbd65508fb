"""Dataset sources: scikit-learn's bundled data, seeded generators, local npz/csv/text files.

Data roots: inside ``with data_roots(folders):`` a dataset file is read only when its real
path (symlinks and ``..`` resolved) lies under one of ``folders``; anything else is refused
with one message that does not say whether the path exists. The HTTP server checks submitted
manifests this way; the command line reads any file its user can. Error messages name the
file and a row or column, never the file's content.
"""

from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np

from caramba.data.core import ArrayDataset, DataError, Dataset, TextDataset
from caramba.errors import did_you_mean

SKLEARN_SETS = {
    # name -> (file in sklearn/datasets/data, has a "n,features,class names" header, description)
    "digits": ("digits.csv.gz", False, "8x8 images of handwritten digits, 1797 examples, 10 classes"),
    "iris": ("iris.csv", True, "iris flowers, 150 examples, 4 features, 3 classes"),
    "wine": ("wine_data.csv", True, "wine cultivars, 178 examples, 13 features, 3 classes"),
    "breast_cancer": ("breast_cancer.csv", True, "breast cancer diagnosis, 569 examples, 30 features, 2 classes"),
}


# A hawkes dataset simulates at most this many events (Ogata thinning on the host, a few seconds).
MAX_HAWKES_EVENTS = 40_000
# A generated dataset holds at most this many numbers (512 MiB of float64).
MAX_GENERATED_VALUES = 1 << 26
# Never data, whatever the roots say: the kernel's and devices' views of the machine.
SYSTEM_DIRS = ("/proc", "/sys", "/dev")

_ROOTS: ContextVar[tuple[str, ...] | None] = ContextVar("caramba_data_roots", default=None)


@contextmanager
def data_roots(roots: Iterable[str | Path] | None) -> Iterator[None]:
    """Within the block, dataset files are read only from under ``roots`` (``None``: no limit)."""
    token = _ROOTS.set(None if roots is None else tuple(os.path.realpath(r) for r in roots))
    try:
        yield
    finally:
        _ROOTS.reset(token)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def outside_roots(base: Path | str, path: str) -> bool:
    """Whether ``path`` (relative to ``base``) is refused by the data roots in force: its real
    path (symlinks and ``..`` resolved) is under none of them, or under /proc, /sys or /dev.
    False when no roots are in force."""
    roots = _ROOTS.get()
    if roots is None:
        return False
    if not path or "\x00" in path or path.startswith("~"):
        return True
    real = os.path.realpath(os.path.join(base, path))  # an absolute path replaces base
    return any(_under(real, d) for d in SYSTEM_DIRS) or not any(_under(real, r) for r in roots)


def _outside(name: str, key: tuple[str, ...] = ()) -> DataError:
    # One message for every refused path: it must not tell an existing file from a missing one.
    return DataError(
        f"dataset '{name}': its path is outside the folders this server reads data from",
        hint="use a file next to the manifest (a relative path inside its folder), a generated or "
        "scikit-learn dataset, or a file under one of the server's data roots (setting serve_data_roots)",
        key=key,
    )


def load_dataset(name: str, spec: Any, base_dir: Path | str = ".") -> Dataset:
    """Build dataset ``name`` from its manifest spec (a mapping or the schema model).

    Relative file paths are resolved against ``base_dir`` (the manifest's folder).
    """
    s = spec.model_dump() if hasattr(spec, "model_dump") else dict(spec)
    source = s.get("source")
    loaders = {"sklearn": _sklearn, "generated": _generated, "hawkes": _hawkes, "causal_linear": _causal_linear, "npz": _npz, "csv": _csv, "text": _text, "deeplake": _deeplake}
    if source not in loaders:
        raise DataError(f"dataset '{name}': unknown source {source!r}; {did_you_mean(str(source), loaders)}")
    split = s.get("split") or {"train": 0.8, "val": 0.0, "test": 0.2}
    fractions = (split["train"], split["val"], split["test"])
    seed = s.get("seed", 0)
    if not isinstance(seed, int) or not 0 <= seed < 1 << 63:
        raise DataError(f"dataset '{name}': seed must be an integer from 0 to 2**63-1, got {seed!r}")
    return loaders[source](name, s, fractions, Path(base_dir))


def _resolve(base: Path, path: str, name: str) -> Path:
    roots = _ROOTS.get()
    if roots is None:
        p = Path(path).expanduser()
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise DataError(f"dataset '{name}': file {p} does not exist")
        return p
    if outside_roots(base, path):
        raise _outside(name)
    real = os.path.realpath(os.path.join(base, path))
    if not os.path.isfile(real):
        raise DataError(f"dataset '{name}': file {path} does not exist")
    return Path(real)


# ---- scikit-learn's bundled data (read from the package's files, without importing sklearn) ----


def sklearn_data_dir() -> Path:
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "this dataset is bundled with scikit-learn, which is not installed",
            hint="pip install 'caramba[data]'  (or: pip install scikit-learn)",
        )
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"


@functools.lru_cache(maxsize=4)
def _sklearn_table(path: str, header: bool, mtime_ns: int, size: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """A bundled file parsed once per process (and again if it changes: ``mtime_ns``, ``size``),
    read-only (``ArrayDataset`` copies its rows out): validating a manifest binds its data, and
    parsing the digits file was 35 of the 44 ms of validating examples/digits_mlp.yml (a
    server validates the same file again and again)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        classes = tuple(f.readline().strip().split(",")[2:]) if header else ()
        table = np.loadtxt(f, delimiter=",", dtype=np.float64)
    table.setflags(write=False)
    return table, classes


def _sklearn(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    which = s.get("name", "digits")
    if which not in SKLEARN_SETS:
        raise DataError(f"dataset '{name}': scikit-learn set {which!r} is not bundled; {did_you_mean(which, SKLEARN_SETS)}")
    file, header, desc = SKLEARN_SETS[which]
    path = sklearn_data_dir() / file
    if not path.is_file():
        raise DataError(f"dataset '{name}': {path} is missing from the scikit-learn installation")
    stat = path.stat()
    table, classes = _sklearn_table(str(path), header, stat.st_mtime_ns, stat.st_size)
    x, y = table[:, :-1], table[:, -1].astype(np.int64)
    if s.get("scale", True):
        if which == "digits":
            x = x / 16.0  # pixel intensities 0..16
        else:
            mu, sd = x.mean(axis=0), x.std(axis=0)
            x = (x - mu) / np.where(sd > 0, sd, 1.0)
    arrays = {"x": x, "y": y}
    if which == "digits":
        arrays["image"] = x.reshape(-1, 1, 8, 8)
    n_classes = int(y.max()) + 1
    info = {"description": desc, "source": f"scikit-learn {which} ({path.name})", "classes": n_classes,
            "class_names": list(classes) or [str(i) for i in range(n_classes)]}
    return ArrayDataset(name, arrays, fractions, s.get("seed", 0), info, s.get("limit"))


# ---- generated ----------------------------------------------------------------------------


def _generated(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    kind = s.get("kind", "blobs")
    rng = np.random.default_rng(s.get("seed", 0))
    n, f, k, noise = s.get("n", 1000), s.get("features", 2), s.get("classes", 2), s.get("noise", 0.1)
    if not isinstance(noise, int | float) or not math.isfinite(noise) or noise < 0:
        raise DataError(f"dataset '{name}': noise must be a finite number >= 0, got {noise!r}")
    width = {"spirals": 2, "xor": 2, "tones": s.get("length", 256), "tmaze": 17}.get(kind, f)
    values = max(n * (width + 1), k * f)
    if values > MAX_GENERATED_VALUES:
        raise DataError(f"dataset '{name}': a generated dataset of {n} examples x {width} values is {values:,} "
                        f"numbers, over the limit of {MAX_GENERATED_VALUES:,}",
                        hint="lower n (or features, classes, length); bigger data belongs in a file")
    info: dict[str, Any] = {"description": f"generated {kind}", "classes": k}
    if kind == "blobs":
        centers = rng.normal(0.0, 3.0, size=(k, f))
        y = rng.integers(0, k, size=n)
        x = centers[y] + rng.normal(0.0, 1.0 + noise, size=(n, f))
        arrays = {"x": x, "y": y}
    elif kind == "spirals":
        y = rng.integers(0, k, size=n)
        t = rng.uniform(0.25, 1.0, size=n)
        angle = 4.0 * t + 2 * np.pi * y / k
        x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) + rng.normal(0, noise * 0.1, size=(n, 2))
        arrays = {"x": x, "y": y}
    elif kind == "xor":
        x = rng.uniform(-1, 1, size=(n, 2))
        y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int64)
        arrays = {"x": x + rng.normal(0, noise * 0.1, size=x.shape), "y": y}
        info["classes"] = 2
    elif kind == "regression":
        w = rng.normal(size=(f, 1))
        x = rng.normal(size=(n, f))
        arrays = {"x": x, "y": x @ w + noise * rng.normal(size=(n, 1))}
        info.pop("classes")
    elif kind == "tones":
        length = s.get("length", 256)
        y = rng.integers(0, k, size=n)
        freq = 2.0 + 1.5 * y + rng.uniform(-0.5, 0.5, size=n)  # cycles per window: class bands 1.5 apart
        phase = rng.uniform(0, 2 * np.pi, size=n)
        t = np.arange(length) / length
        wave = np.sin(2 * np.pi * freq[:, None] * t[None, :] + phase[:, None])
        wave += noise * rng.normal(size=wave.shape)
        arrays = {"wave": wave[:, None, :], "y": y}
    elif kind == "factors":  # index tuples for codebook factorization (vsa resonator)
        arrays = {f"f{i}": rng.integers(0, k, size=n) for i in range(s.get("factors", 3))}
    elif kind == "tmaze":  # first steps of T-maze episodes (active_inference.tmaze): at the centre
        d = np.array([0.5, 0.5, 0, 0, 0, 0, 0, 0])  # D: at the centre, either context
        arrays = {"obs": np.tile(np.eye(7)[0], (n, 1)), "prior": np.tile(d, (n, 1)),
                  "context": rng.integers(0, 2, size=n), "cue": np.full(n, 3, dtype=np.int64)}
        info["classes"] = 4
    else:
        raise DataError(f"dataset '{name}': unknown generated kind {kind!r}; "
                        + did_you_mean(kind, ("blobs", "spirals", "xor", "regression", "tones", "factors", "tmaze")))
    return ArrayDataset(name, arrays, fractions, s.get("seed", 0), info, s.get("limit"))


@functools.lru_cache(maxsize=8)
def _hawkes_sequences(mu: bytes, alpha: bytes, beta: bytes, shape: tuple[int, int, int], n: int, events: int,
                      seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` simulated sequences (times, marks), each [n, events], read-only (``ArrayDataset``
    copies its rows out), once per process for the same parameters: validating a manifest
    binds its data, and simulating examples/hawkes_fit.yml's 20,000 events takes ~1.4 s (the
    same every time)."""
    from caramba.ops.hawkes import simulate_numpy

    m = shape[0]
    mu_a = np.frombuffer(mu, np.float64).reshape(m)
    alpha_a, beta_a = np.frombuffer(alpha, np.float64).reshape(shape), np.frombuffer(beta, np.float64).reshape(shape)
    seqs = [simulate_numpy(mu_a, alpha_a, beta_a, events, seed, key=i) for i in range(n)]
    times, marks = np.stack([q[0] for q in seqs]), np.stack([q[1] for q in seqs])
    times.setflags(write=False)
    marks.setflags(write=False)
    return times, marks


def _hawkes(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    """Sequences of a Hawkes process by caramba's Ogata thinning, sequence i from stream key i."""
    try:
        mu = np.asarray(s["mu"], dtype=np.float64)
        alpha, beta = np.asarray(s["alpha"], dtype=np.float64), np.asarray(s["beta"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"dataset '{name}': mu [M], alpha and beta [M][M][K] must be numbers ({exc})") from None
    m = mu.shape[0] if mu.ndim == 1 else 0
    if m == 0 or alpha.shape != (m, m, alpha.shape[-1]) or beta.shape != alpha.shape:
        raise DataError(f"dataset '{name}': needs mu [M], alpha and beta [M][M][K]; got {mu.shape}, {alpha.shape}, {beta.shape}")
    n, events = int(s.get("n", 32)), int(s.get("events", 256))
    if not 1 <= n * events <= MAX_HAWKES_EVENTS:
        raise DataError(f"dataset '{name}': {n} x {events} events is outside 1 .. {MAX_HAWKES_EVENTS:,} (simulated on "
                        "the host, about 25 us per event)")
    seed = s.get("seed", 0)
    times, marks = _hawkes_sequences(mu.tobytes(), alpha.tobytes(), beta.tobytes(), alpha.shape, n, events, seed)
    if not np.all(np.isfinite(times)):
        raise DataError(f"dataset '{name}': the process died out before {events} events (mu must be > 0)")
    arrays = {"times": times, "marks": marks, "T": times[:, -1].copy()}
    info = {"description": f"{n} sequences of {events} events of a {m}-dimensional Hawkes process",
            "source": "hawkes.simulate (Ogata thinning)"}
    return ArrayDataset(name, arrays, fractions, seed, info, s.get("limit"))


def _causal_linear(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    """Rows of a linear-Gaussian SCM, sampled variable by variable in a topological order."""
    try:
        w = np.asarray(s["weights"], dtype=np.float64)
        noise = np.asarray(s["noise"], dtype=np.float64)
        b = np.zeros(len(w)) if s.get("intercepts") is None else np.asarray(s["intercepts"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"dataset '{name}': weights [d][d], noise [d] and intercepts [d] must be numbers ({exc})") from None
    d = w.shape[0] if w.ndim == 2 else 0
    if d == 0 or w.shape != (d, d) or noise.shape != (d,) or b.shape != (d,):
        raise DataError(f"dataset '{name}': needs weights [d][d], noise [d], intercepts [d]; got {w.shape}, "
                        f"{noise.shape}, {b.shape}")
    order, left = [], set(range(d))
    while left:
        roots = sorted(j for j in left if not np.any(w[[i for i in left if i != j], j]) and w[j, j] == 0)
        if not roots:
            raise DataError(f"dataset '{name}': weights must be a DAG; variables {sorted(left)} lie on a cycle")
        order += roots
        left -= set(roots)
    n = int(s.get("n", 1000))
    if not 2 <= n * d <= MAX_GENERATED_VALUES:
        raise DataError(f"dataset '{name}': {n} rows of {d} variables is outside 2 .. {MAX_GENERATED_VALUES:,} values")
    rng = np.random.default_rng(s.get("seed", 0))
    e = rng.normal(size=(n, d)) * noise
    x = np.zeros((n, d))
    for j in order:
        x[:, j] = b[j] + x @ w[:, j] + e[:, j]
    info = {"description": f"{n} rows of a {d}-variable linear-Gaussian SCM", "source": "causal_linear"}
    return ArrayDataset(name, {"data": x}, fractions, s.get("seed", 0), info, s.get("limit"))


def _deeplake(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    from caramba.data.deeplake import load  # imports deeplake only when a manifest uses it

    return load(name, s, base)


# ---- local files --------------------------------------------------------------------------


def _npz(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    path = _resolve(base, s["path"], name)
    try:
        with np.load(path, allow_pickle=False) as z:
            available = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as exc:  # their messages may quote the file: name only the kind
        raise DataError(f"dataset '{name}': {path.name} is not a readable .npz file ({type(exc).__name__})",
                        hint="write it with numpy.savez (no pickled objects)") from None
    mapping = s.get("fields") or {k: k for k in available}
    arrays = {}
    for fld, arr in mapping.items():
        if arr not in available:
            raise DataError(f"dataset '{name}': {path.name} has no array '{arr}'; {did_you_mean(arr, available)}")
        arrays[fld] = available[arr]
    info: dict[str, Any] = {"description": f"arrays from {path.name}"}
    if "y" in arrays and np.issubdtype(arrays["y"].dtype, np.integer):
        arrays["y"] = arrays["y"].astype(np.int64)
        info["classes"] = int(arrays["y"].max()) + 1
    return ArrayDataset(name, arrays, fractions, s.get("seed", 0), info, s.get("limit"))


def _csv_rows(name: str, path: Path, delimiter: str) -> list[list[str]]:
    reader = None
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter=delimiter)
            return [r for r in reader if r]  # blank lines are no rows
    except UnicodeDecodeError:
        raise DataError(f"dataset '{name}': {path.name} is not UTF-8 text") from None
    except csv.Error as exc:  # fixed texts ("field larger than field limit"), no content
        line = reader.line_num if reader is not None else 0
        raise DataError(f"dataset '{name}': {path.name} line {line} is not valid CSV: {exc}") from None
    except OSError as exc:
        raise DataError(f"dataset '{name}': cannot read {path.name}: {exc.strerror or type(exc).__name__}") from None


def _csv(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    delimiter = s.get("delimiter", ",")
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n\"":
        raise DataError(f"dataset '{name}': delimiter must be one character (not a quote or line break), "
                        f"got {delimiter!r}")
    path = _resolve(base, s["path"], name)
    rows = _csv_rows(name, path, delimiter)
    header = rows.pop(0) if s.get("header", True) and rows else None
    if not rows:
        raise DataError(f"dataset '{name}': {path.name} has no data rows")
    target = s.get("target", -1)
    ncols = len(rows[0])
    first = 2 if header is not None else 1  # line number of the first data row
    for i, r in enumerate(rows):
        if len(r) != ncols:
            raise DataError(f"dataset '{name}': {path.name} row {first + i} has {len(r)} columns, the first row {ncols}")
    if isinstance(target, str):
        # Column names are the file's content: say how many there are, never what they are.
        if header is None or target not in header:
            raise DataError(f"dataset '{name}': no column '{target}' in {path.name}; "
                            + (f"its header has {len(header)} columns; give a column's exact name or its index"
                               if header else "the file has no header; give the column's index"))
        col = header.index(target)
    elif isinstance(target, int) and -ncols <= target < ncols:
        col = target % ncols
    else:
        raise DataError(f"dataset '{name}': target column {target!r} is out of range for {ncols} columns")
    table = np.empty((len(rows), ncols), dtype=np.float64)
    for i, r in enumerate(rows):
        for j, v in enumerate(r):
            try:
                table[i, j] = float(v)
            except ValueError:  # the ValueError quotes the cell: name its place instead
                raise DataError(f"dataset '{name}': {path.name} must hold numbers only; row {first + i}, "
                                f"column {j + 1} is not a number") from None
    if not np.isfinite(table).all():
        i, j = np.argwhere(~np.isfinite(table))[0]
        raise DataError(f"dataset '{name}': {path.name} row {first + i}, column {j + 1} is not a finite number")
    x = np.delete(table, col, axis=1)
    info: dict[str, Any] = {"description": f"{path.name}, {len(rows)} rows"}
    if s.get("target_dtype", "int64") == "int64":
        labels = table[:, col]
        if (labels < 0).any() or (labels != np.round(labels)).any() or (labels >= 1 << 31).any():
            raise DataError(f"dataset '{name}': the target column of {path.name} must hold class indices "
                            "(whole numbers from 0); for real-valued targets set target_dtype: float64")
        y = labels.astype(np.int64)
        info["classes"] = int(y.max()) + 1
    else:
        y = table[:, col : col + 1]
    return ArrayDataset(name, {"x": x, "y": y}, fractions, s.get("seed", 0), info, s.get("limit"))


def _text(name: str, s: Mapping[str, Any], fractions, base: Path) -> Dataset:
    path = _resolve(base, s["path"], name)
    try:
        text = path.read_text(encoding=s.get("encoding", "utf-8"))
    except UnicodeDecodeError as exc:  # its message quotes the bytes: name the offset only
        raise DataError(f"dataset '{name}': {path.name} is not {s.get('encoding', 'utf-8')} text "
                        f"(byte {exc.start})") from None
    except LookupError:
        raise DataError(f"dataset '{name}': unknown text encoding {s.get('encoding')!r}") from None
    except OSError as exc:
        raise DataError(f"dataset '{name}': cannot read {path.name}: {exc.strerror or type(exc).__name__}") from None
    if s.get("max_chars"):
        text = text[: s["max_chars"]]
    limit = s.get("vocab_size")
    if s.get("tokenizer") is not None:
        return _tokenized(name, s, text, path, fractions, base)
    vocab = sorted(set(text))
    if limit is not None and len(vocab) > limit:
        raise DataError(f"dataset '{name}': {path.name} has {len(vocab)} distinct characters, more than vocab_size {limit}")
    index = {c: i for i, c in enumerate(vocab)}
    tokens = np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))
    info = {"description": f"characters of {path.name}", "source": str(path)}
    return TextDataset(name, tokens, vocab, s.get("context", 64), fractions, info)


def _tokenized(name: str, s: Mapping[str, Any], text: str, path: Path, fractions, base: Path) -> Dataset:
    # The `tokenizer:` option of a text dataset: a byte-level BPE trained on the text, or a tokenizer.json.
    # Its errors name their key (`key=`), so a manifest error points at the `tokenizer:` lines.
    from caramba.text.tokenizer import TokenizerError, tokenizer_files, tokenizer_from_files, train_bpe

    t = dict(s["tokenizer"])
    key: tuple[str, ...] = ("tokenizer",)
    try:
        if t.get("path") is not None:
            where = t["path"]
            key = ("tokenizer", "path")
            if not isinstance(where, str) or outside_roots(base, where):
                raise _outside(name, key)
            p = Path(where) if _ROOTS.get() is not None else Path(where).expanduser()  # roots refuse ~
            files = tokenizer_files(p if p.is_absolute() else base / p)
            if any(outside_roots(base, str(f)) for f in files.values()):  # a folder's file may link out
                raise _outside(name, key)
            tok = tokenizer_from_files(files)
            desc = f"tokens of {path.name} ({Path(where).name} tokenizer)"
        elif t.get("type") == "bpe" and isinstance(t.get("vocab_size"), int):
            lines = text.splitlines(keepends=True)
            chunks = ("".join(lines[i : i + 1000]) for i in range(0, len(lines), 1000))
            min_frequency = t.get("min_frequency")
            key = ("tokenizer", "vocab_size")  # what train_bpe can refuse
            tok = train_bpe(chunks, t["vocab_size"], 2 if min_frequency is None else min_frequency)
            desc = f"tokens of {path.name} (byte-level BPE trained on it)"
        else:
            raise DataError(f"dataset '{name}': tokenizer must be {{type: bpe, vocab_size: N}} or {{path: FILE}}, "
                            f"got {sorted(t)}", key=key)
        key = ("tokenizer",)
        tokens = np.asarray(tok.encode(text), dtype=np.int64)
    except TokenizerError as exc:
        raise DataError(f"dataset '{name}': tokenizer: {exc.message}", hint=exc.hint, key=key) from None
    limit = s.get("vocab_size")
    if limit is not None and tok.vocab_size > limit:
        raise DataError(f"dataset '{name}': its tokenizer has {tok.vocab_size} tokens, more than vocab_size {limit}",
                        key=("tokenizer",))
    vocab = [tok.id_to_token(i) or "" for i in range(tok.vocab_size)]
    info = {"description": desc, "source": str(path), "characters": len(text)}
    return TextDataset(name, tokens, vocab, s.get("context", 64), fractions, info, tokenizer=tok)
