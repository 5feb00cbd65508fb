"""The safetensors format, as the training layer has always named it: the code lives in
``caramba.compute.safetensors`` (below the backends, so a backend's host effects can write it
without importing the training layer)."""

from caramba.compute.safetensors import CODES, DTYPES, MAX_HEADER, CheckpointError, dumps, load, loads, save

__all__ = ["CODES", "DTYPES", "MAX_HEADER", "CheckpointError", "dumps", "load", "loads", "save"]
