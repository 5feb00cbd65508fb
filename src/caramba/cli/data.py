"""``caramba data import SOURCE DEST``: write a scikit-learn or npz dataset into a Deep Lake dataset.

SOURCE is ``sklearn:NAME`` (a set bundled with scikit-learn: digits, iris, wine, breast_cancer,
read as the manifest's ``source: sklearn`` reads it) or an ``.npz`` file (features and labels
named by ``--x``/``--y``). Its rows are shuffled by ``--seed`` and split by ``--split`` exactly as
the built-in sources do, then written to DEST (a folder or ``s3://bucket/prefix``) as columns
``x`` and ``y`` and a text column ``split``, train rows first: a manifest with ``source:
deeplake`` then trains on the same batches as the built-in source with the same split and seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

SPLIT_HELP = "train,val,test fractions adding up to 1 (the built-in sources' default 0.8,0,0.2)"


def _fractions(text: str) -> dict[str, float]:
    from caramba.data import DataError

    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 3:
        raise DataError(f"--split must be three numbers train,val,test (e.g. 0.8,0,0.2), got {text!r}")
    return dict(zip(("train", "val", "test"), parts))


def import_dataset(source: str, dest: str, *, split: str = "0.8,0,0.2", seed: int = 0, x: str = "x",
                   y: str | None = "y", scale: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Write ``source`` into a Deep Lake dataset at ``dest``; returns what was written."""
    from caramba.data import ArrayDataset, DataError, load_dataset
    from caramba.data.core import split_counts
    from caramba.data.deeplake import check_location, deeplake_module, is_s3, s3_creds, write_arrays

    check_location(dest, "import")
    deeplake_module()
    fractions = _fractions(split)
    split_counts(10, tuple(fractions.values()), "import")  # the fractions' own checks
    if not 0 <= seed < 2**63:
        raise DataError(f"--seed must be an integer from 0 to 2**63-1, got {seed}")
    meta: dict[str, Any]
    if source.startswith("sklearn:"):
        which = source.split(":", 1)[1]
        ds = load_dataset(which, {"source": "sklearn", "name": which, "scale": scale, "split": fractions, "seed": seed})
        fields = ("x", "y")
        meta = {k: ds.info[k] for k in ("description", "classes", "class_names") if k in ds.info}
    elif source.endswith(".npz"):
        path = Path(source).expanduser()
        if not path.is_file():
            raise DataError(f"{path} does not exist", hint="SOURCE is sklearn:NAME or an .npz file")
        try:
            with np_load(path) as z:
                names = list(z.files)
                if x not in names or (y is not None and y not in names):
                    from caramba.errors import did_you_mean

                    miss = x if x not in names else y
                    raise DataError(f"{path.name} has no array '{miss}'; {did_you_mean(str(miss), names)}",
                                    hint="name the arrays with --x and --y (--no-y for features only)")
                arrays = {"x": z[x], **({"y": z[y]} if y is not None else {})}
        except (OSError, ValueError, EOFError) as exc:
            raise DataError(f"{path.name} is not a readable .npz file ({type(exc).__name__})",
                            hint="write it with numpy.savez (no pickled objects)") from None
        fields = tuple(arrays)
        meta = {"description": f"arrays {x}" + (f", {y}" if y is not None else "") + f" of {path.name}"}
        if "y" in arrays and arrays["y"].dtype.kind in "iu" and arrays["y"].size:
            meta["classes"] = int(arrays["y"].max()) + 1
        ds = ArrayDataset(path.name, arrays, tuple(fractions.values()), seed, meta)
    else:
        raise DataError(f"unknown import source {source!r}",
                        hint="give sklearn:NAME (digits, iris, wine, breast_cancer) or a file ending in .npz")
    parts = {s: {f: ds.parts[s][f] for f in fields} for s in ("train", "val", "test")}
    meta.update({"source": source, "split": fractions, "seed": seed, "written_by": "caramba data import"})
    rows = write_arrays(dest, parts, meta, overwrite=overwrite, creds=s3_creds() if is_s3(dest) else None)
    return {"rows": rows, "sizes": {s: ds.size(s) for s in ("train", "val", "test")}, "fields": list(fields),
            "dest": dest}


def np_load(path: Path) -> Any:
    import numpy as np

    return np.load(path, allow_pickle=False)


def register(app: typer.Typer) -> None:
    data = typer.Typer(help="Datasets: write scikit-learn or npz data into a Deep Lake dataset.",
                       no_args_is_help=True)
    app.add_typer(data, name="data")

    @data.command("import")
    def import_(
        source: str = typer.Argument(..., help="sklearn:NAME (digits, iris, wine, breast_cancer) or an .npz file"),
        dest: str = typer.Argument(..., help="the Deep Lake dataset to write: a folder or s3://bucket/prefix"),
        overwrite: bool = typer.Option(False, "--overwrite", help="replace a dataset that exists at DEST"),
        split: str = typer.Option("0.8,0,0.2", "--split", help=SPLIT_HELP),
        seed: int = typer.Option(0, "--seed", help="the shuffle before splitting (a manifest dataset's seed)"),
        x: str = typer.Option("x", "--x", help="npz: the array of features (written as column x)"),
        y: str = typer.Option("y", "--y", help="npz: the array of labels (written as column y)"),
        no_y: bool = typer.Option(False, "--no-y", help="npz: features only, no labels"),
        scale: bool = typer.Option(True, "--scale/--no-scale", help="sklearn: digits pixels / 16, others standardized"),
    ) -> None:
        """Write SOURCE into a new Deep Lake dataset at DEST (columns x, y and split)."""
        out = import_dataset(source, dest, split=split, seed=seed, x=x, y=None if no_y else y, scale=scale,
                             overwrite=overwrite)
        sizes = ", ".join(f"{k} {v}" for k, v in out["sizes"].items() if v)
        typer.echo(f"wrote {out['rows']} rows ({sizes}; columns {', '.join(out['fields'])}, split) to {dest}")
