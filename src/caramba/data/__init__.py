"""caramba.data: datasets that need no network.

Sources: data bundled with a PyPI package (scikit-learn's digits, iris, wine, breast cancer;
``pip install caramba[data]``), seeded generators, and local files (npz, csv, a char-level text
corpus). Every dataset is a set of named fields split into ``train``/``val``/``test``; the
split is a fixed function of the dataset's own seed, so held-out data stays held out whatever
seed a run uses.
"""

from caramba.data.core import ArrayDataset, DataError, Dataset, TextDataset, unify_dims
from caramba.data.sources import load_dataset

__all__ = ["ArrayDataset", "DataError", "Dataset", "TextDataset", "load_dataset", "unify_dims"]
