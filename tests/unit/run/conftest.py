"""The small generated-data experiment the run-engine tests train (one place for its text:
tests/unit/blobs_manifest.py)."""

import pytest

from ..blobs_manifest import blobs_manifest


@pytest.fixture
def blobs():
    """``blobs(name, trainer, runs, n=200)``: a 3-class MLP on generated blobs; ``trainer`` and
    ``runs`` are YAML flow text."""

    def make(name: str, trainer: str, runs: str, *, n: int = 200) -> str:
        return blobs_manifest(name, n=n, trainer=trainer, runs=runs)

    return make
