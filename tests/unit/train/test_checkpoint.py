"""safetensors files and the in-graph checkpoint op."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from caramba import compute, ir
from caramba.ops import train as train_ops
from caramba.train import CheckpointError, load_checkpoint, read_checkpoint, safetensors, save_checkpoint


def test_safetensors_layout_is_the_published_format(tmp_path):
    tensors = {"b": np.arange(3, dtype=np.int32), "a": np.array([[1.5, -2.0]]), "m": np.array([True, False])}
    path = safetensors.save(tmp_path / "x.safetensors", tensors, {"k": "v"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8 : 8 + n])
    assert header["__metadata__"] == {"k": "v"}
    assert header["a"] == {"dtype": "F64", "shape": [1, 2], "data_offsets": [0, 16]}
    assert header["b"] == {"dtype": "I32", "shape": [3], "data_offsets": [16, 28]}
    assert header["m"] == {"dtype": "BOOL", "shape": [2], "data_offsets": [28, 30]}
    assert raw[8 + n : 8 + n + 16] == np.array([1.5, -2.0], dtype="<f8").tobytes()
    back, meta = safetensors.load(path)
    assert meta == {"k": "v"}
    for k, v in tensors.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == v.dtype


def test_safetensors_package_reads_our_files_and_we_read_its(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path = safetensors.save(tmp_path / "y.safetensors", {"w": np.eye(2)}, {"step": "3"})
    np.testing.assert_array_equal(st.load_file(str(path))["w"], np.eye(2))
    theirs = tmp_path / "z.safetensors"
    st.save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([1, 2])}, str(theirs), metadata={"k": "v"})
    tensors, meta = safetensors.load(theirs)
    assert meta == {"k": "v"} and tensors["w"].dtype == np.float32
    np.testing.assert_array_equal(tensors["w"], np.arange(6).reshape(2, 3))


def _framed(header: dict) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize("data, message", [
    (b"\x01", "too short"),
    (struct.pack("<Q", 1000) + b"{}", "header length 1000 is out of range"),
    (struct.pack("<Q", 2) + b"{x", "header is not JSON"),
    (_framed({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}}) + bytes(8), "do not fit"),
])
def test_malformed_files_are_named_errors(tmp_path, data, message):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(data)
    with pytest.raises(CheckpointError, match=message):
        safetensors.load(p)


def test_runner_state_round_trip_with_metadata(tmp_path):
    with compute.new("cpu") as r:
        r.state["w"] = r.upload(np.arange(6.0).reshape(2, 3))
        r.state["opt.step"] = r.upload(np.array(12, dtype=np.int64))
        path = save_checkpoint(tmp_path / "c.safetensors", r, step=12, graph_hash="abc", manifest_hash="def")
    tensors, info = read_checkpoint(path)
    assert (info.step, info.graph_hash, info.manifest_hash) == (12, "abc", "def")
    with compute.new("cpu") as r2:
        load_checkpoint(path, r2, expect_graph_hash="abc")
        np.testing.assert_array_equal(r2.state["w"].download(), tensors["w"])
        with pytest.raises(CheckpointError, match="was saved from graph abc"):
            load_checkpoint(path, r2, expect_graph_hash="other")
    plain = safetensors.save(tmp_path / "plain.safetensors", {"w": np.zeros(2)})
    with pytest.raises(CheckpointError, match="is not a caramba checkpoint"):
        read_checkpoint(plain)


def test_checkpoint_node_is_an_effect_the_compiler_keeps(tmp_path):
    with ir.Graph("ck") as g:
        step = g.input("step", (), "int64")
        w = g.input("w", (3,))
        train_ops.save(step, w * 2.0, path=str(tmp_path / "s{step}.safetensors"), names="w2", every=5)
        g.output("w", w)  # the checkpoint's result is not an output
    assert ir.get_op("train.checkpoint.save").effect is ir.Effect.checkpoint
    with compute.new("cpu") as r:
        exe = r.compile(g)
        assert any(n.op == "train.checkpoint.save" for n in exe.graph.nodes)
        for s in range(1, 11):
            exe.run({"step": r.upload(np.array(s, dtype=np.int64)), "w": r.upload(np.full(3, float(s)))})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s10.safetensors", "s5.safetensors"]
    tensors, meta = safetensors.load(tmp_path / "s10.safetensors")
    np.testing.assert_array_equal(tensors["w2"], np.full(3, 20.0))
    assert meta["step"] == "10"


def test_checkpoints_keep_their_place_among_state_writes(tmp_path):
    """A checkpoint before a write saves the old value, one after it the new one, whatever the
    compiler does to the graph."""
    with ir.Graph("order") as g:
        step = g.input("step", (), "int64")
        w = g.variable("w", (2,))
        train_ops.save(step, w, path=str(tmp_path / "before.safetensors"), names="w")
        g.write("w", w + 1.0)
        train_ops.save(step, g.read("w"), path=str(tmp_path / "after.safetensors"), names="w")
    with compute.new("cpu") as r:
        r.state["w"] = r.upload(np.array([1.0, 2.0]))
        exe = r.compile(g)
        kinds = [n.op for n in exe.graph.nodes if n.op in ("train.checkpoint.save", "state.write")]
        assert kinds == ["train.checkpoint.save", "state.write", "train.checkpoint.save"]
        exe.run({"step": r.upload(np.array(1, dtype=np.int64))})
    np.testing.assert_array_equal(safetensors.load(tmp_path / "before.safetensors")[0]["w"], [1.0, 2.0])
    np.testing.assert_array_equal(safetensors.load(tmp_path / "after.safetensors")[0]["w"], [2.0, 3.0])


def test_a_checkpoint_goes_to_the_host_sink_in_force(tmp_path):
    """The kernel hands the tensors to caramba.compute.effects; a caller can take them instead of
    a file (and the default sink writes the file again once the block ends)."""
    from caramba.compute import effects

    with ir.Graph("sink") as g:
        step = g.input("step", (), "int64")
        w = g.input("w", (2,))
        train_ops.save(step, w * 3.0, path=str(tmp_path / "s{step}.safetensors"), names="w3")
        g.output("w", w)
    taken: list = []
    with compute.new("cpu") as r:
        exe = r.compile(g)
        feed = {"step": r.upload(np.array(4, dtype=np.int64)), "w": r.upload(np.array([1.0, 2.0]))}
        with effects.checkpoint_sink(lambda path, tensors, meta: taken.append((path, dict(tensors), dict(meta)))):
            exe.run(feed)
        assert not list(tmp_path.iterdir())  # nothing written while the sink took it
        exe.run(feed)
    [(path, tensors, meta)] = taken
    assert path == str(tmp_path / "s4.safetensors") and meta["step"] == "4"
    np.testing.assert_array_equal(tensors["w3"], [3.0, 6.0])
    np.testing.assert_array_equal(safetensors.load(tmp_path / "s4.safetensors")[0]["w3"], [3.0, 6.0])
