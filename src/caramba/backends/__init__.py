"""Backends: one package each, imported lazily by caramba.compute.registry."""
