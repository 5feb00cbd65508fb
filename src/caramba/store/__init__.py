"""caramba.store: blob and metadata stores (local directory + SQLite by default, S3)."""

from caramba.store.blobs import (
    BlobExists,
    BlobNotFound,
    BlobRef,
    BlobStore,
    IntegrityError,
    LocalBlobStore,
    StoreError,
    open_store,
)
from caramba.store.runs import Artifact, RunNotFound, RunRecord, RunStore, open_runs
