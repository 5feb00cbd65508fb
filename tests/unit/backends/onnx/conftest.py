"""ONNX Runtime keeps a telemetry database under $HOME/.cache unless told not to. The runners
the onnx backend tests share: ``ox`` (onnx), ``cpu`` and ``backends`` (both), one per test module
(helpers to run and build graphs: onnx_helpers.py)."""

import os

import pytest

os.environ["ORT_DISABLE_TELEMETRY"] = "1"


def _runner(spec):
    from caramba import compute

    r = compute.new(spec)
    yield r
    r.close()


@pytest.fixture(scope="module")
def ox():
    yield from _runner("onnx")


@pytest.fixture(scope="module")
def cpu():
    yield from _runner("cpu")


@pytest.fixture(scope="module")
def backends(ox, cpu):
    """(the onnx runner, the cpu runner)."""
    return ox, cpu
