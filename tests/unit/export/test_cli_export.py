"""`caramba export` from the command line: files written, and hostile arguments answered with
one clear error line (exit 2), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")


def _caramba(*args: str, cwd=None) -> subprocess.CompletedProcess:
    code = "import sys; from caramba.cli import main; sys.argv = ['caramba', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_writes_onnx_and_safetensors(trained, store, tmp_path):
    from safetensors.numpy import load_file
    from typer.testing import CliRunner

    from caramba.cli import app

    run_id = trained("digits_cnn")
    cli = CliRunner()
    r = cli.invoke(app, ["export", run_id, "--format", "onnx", "--dtype", "float32", "-o", str(tmp_path / "m.onnx"),
                         "--store", str(store.root)])
    assert r.exit_code == 0, r.output
    assert f"wrote {tmp_path / 'm.onnx'}" in r.output
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {"image": np.zeros((3, 1, 8, 8), np.float32)})
    assert out.shape == (3, 10)
    r = cli.invoke(app, ["export", run_id, "--format", "safetensors", "-o", str(tmp_path / "w.safetensors"),
                         "--store", str(store.root)])
    assert r.exit_code == 0, r.output
    assert load_file(str(tmp_path / "w.safetensors"))["cnn.head.weight"].shape == (10, 32)


@pytest.mark.parametrize(("args", "message"), [
    (["export", "no-such-run"], "RunNotFound"),
    (["export", "", "--format", "onnx"], "RunNotFound"),
    (["export", "RUN", "--format", "tflite"], "unknown --format"),
    (["export", "RUN", "--dtype", "bfloat16"], "not an export dtype"),
    (["export", "RUN", "--output", "loss"], "training-only"),
    (["export", "RUN", "--output", "nope"], "no node produces"),
    (["export", "RUN", "-o", "/proc/caramba.onnx"], "cannot write"),
    (["export", "RUN", "--format", "safetensors", "--output", "logits"], "parameters only"),
    (["research", "export", "DIR", "--to", "tensorboard"], "unknown tracker"),
])
def test_bad_arguments_are_one_line_errors(trained, store, args, message):
    """Each is a CarambaError, which `caramba` prints as one line (exit 2; checked end to end below)."""
    from typer.testing import CliRunner

    from caramba.cli import app
    from caramba.errors import CarambaError

    run_id = trained("digits_mlp")
    args = [run_id if a == "RUN" else a for a in args]
    r = CliRunner().invoke(app, [*args, "--store", str(store.root)])
    assert r.exit_code != 0 and isinstance(r.exception, CarambaError), r.output
    assert message in f"{type(r.exception).__name__}: {r.exception}"


def test_the_command_prints_no_traceback(trained, store):
    run_id = trained("digits_mlp")
    r = _caramba("export", run_id, "-o", "/proc/caramba.onnx", "--store", str(store.root))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot write" in r.stderr and "Traceback" not in r.stderr
