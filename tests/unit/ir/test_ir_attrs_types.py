"""Attribute schemas and canonical Attrs, dtypes and ValueType, the op registry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caramba import ir
from caramba.errors import GraphError
from caramba.ir import REQUIRED, Attr, Attrs, DType, OpDef, ValueType
from caramba.ir.attrs import normalize_attrs

SCHEMA = (
    Attr("axis", "int", -1),
    Attr("eps", "float", 1e-5),
    Attr("mode", "str", "constant", choices=("constant", "edge")),
    Attr("sizes", "ints?", None),
    Attr("dtype", "dtype", "float64"),
    Attr("value", "array", REQUIRED),
    Attr("flag", "bool", False),
    Attr("scales", "floats", (1.0,)),
)


def _norm(**given):
    return normalize_attrs(SCHEMA, {"value": [1, 2], **given}, "test.op")


def test_defaults_and_normal_forms():
    a = _norm(axis=np.int64(2), eps=1, sizes=[3, 4], dtype="f32", scales=2)
    assert a["axis"] == 2 and type(a["axis"]) is int
    assert a["eps"] == 1.0 and type(a["eps"]) is float
    assert a["sizes"] == (3, 4) and a["dtype"] is DType.float32 and a["scales"] == (2.0,)
    assert a["mode"] == "constant" and a["flag"] is False
    assert list(a) == sorted(a)  # sorted names
    assert not a["value"].flags.writeable  # arrays are frozen copies
    assert _norm(axis=3.0)["axis"] == 3  # an integral float is an int


@pytest.mark.parametrize(
    "given, match",
    [
        ({"axs": 1}, "unknown attribute 'axs' for test.op; did you mean 'axis'"),
        ({"zzz": 1}, "unknown attribute 'zzz' for test.op; valid: axis, dtype, eps, flag, mode, scales, sizes, value"),
        ({"axis": 1.5}, "attribute 'axis' \\(int\\): expected an int, got 1.5"),
        ({"axis": True}, "attribute 'axis' \\(int\\): expected an int, got True"),
        ({"eps": "small"}, "attribute 'eps' \\(float\\): expected a number"),
        ({"mode": "wrap"}, "attribute 'mode' \\(str\\): 'wrap' is not one of 'constant', 'edge'"),
        ({"flag": 1}, "attribute 'flag' \\(bool\\): expected true/false"),
        ({"sizes": "12"}, "attribute 'sizes' \\(ints\\?\\): expected a list of ints"),
    ],
)
def test_attribute_errors(given, match):
    with pytest.raises(GraphError, match=match) as info:
        _norm(**given)
    assert "op test.op" in str(info.value)


def test_dtype_attribute_error_names_the_node():
    with ir.Graph() as g:
        x = g.input("x", (2,))
        with pytest.raises(GraphError, match="unknown dtype 'float128'; did you mean") as info:
            g.call("math.cast", [x], {"dtype": "float128"}, id="c")
    assert "node 'c'" in str(info.value) and "op math.cast" in str(info.value)


def test_required_attribute():
    with pytest.raises(GraphError, match="missing required attribute 'value' \\(array\\)"):
        normalize_attrs(SCHEMA, {}, "test.op")


def test_attrs_are_hashable_values():
    a, b = _norm(eps=0.5), _norm(eps=0.5)
    assert a == b and hash(a) == hash(b) and a == {**dict(a)}
    assert _norm(value=[1, 3]) != a  # arrays compare by content
    nan1, nan2 = Attrs({"x": math.nan}), Attrs({"x": float("nan")})
    assert nan1 == nan2  # NaN attributes equal themselves
    assert a.replace(eps=1.0)["eps"] == 1.0 and a["eps"] == 0.5
    assert "eps=0.5" in repr(a) and "value=array([1, 2], int64)" in repr(a)
    with pytest.raises(KeyError):
        a["nope"]


def test_attr_schema_is_checked():
    with pytest.raises(ValueError, match="unknown attribute kind"):
        Attr("x", "complex")


@pytest.mark.parametrize(
    "name, want",
    [("float64", DType.float64), ("f32", DType.float32), (np.float16, DType.float16), (np.dtype("int8"), DType.int8), ("bool", DType.bool), (DType.uint8, DType.uint8), ("bf16", DType.bfloat16)],
)
def test_dtype_coercion(name, want):
    assert ir.dtype(name) is want


def test_dtype_facts():
    assert DType.float64.itemsize == 8 and DType.bfloat16.itemsize == 2 and DType.bool.itemsize == 1
    assert DType.float16.is_float and DType.uint8.is_int and DType.bool.is_bool and not DType.int8.is_float
    assert str(DType.int32) == "int32" and repr(DType.int32) == "DType.int32" and DType.int32.short == "i32"
    assert DType.float32.numpy == np.dtype(np.float32)
    with pytest.raises(GraphError, match="unknown dtype 'flaot32'; did you mean 'float32'"):
        ir.dtype("flaot32")


def test_value_type():
    t = ValueType([2, 3], "f32")
    assert t.shape == (2, 3) and t.dtype is DType.float32 and t.rank == 2 and t.size == 6 and t.nbytes == 24
    assert str(t) == "f32[2,3]" and str(ValueType((), DType.bool)) == "bool[]"
    assert t.with_shape((6,)) == ValueType((6,), DType.float32) and t.with_dtype(DType.int8).dtype is DType.int8
    with pytest.raises(GraphError, match="negative dimension"):
        ValueType((2, -1), DType.float64)


def test_registry():
    ops = ir.all_ops()
    assert "math.add" in ops and ops["math.add"].family == "math" and ops["math.add"].name == "add"
    assert "math.add" in ir.having("commutative") and "math.sub" not in ir.having("commutative")
    assert "reduce.sum" in ir.having("reduction") and "math.exp" in ir.having("elementwise")
    with pytest.raises(GraphError, match="unknown op 'math.ad'; did you mean 'math.add'"):
        ir.get_op("math.ad")
    with pytest.raises(ValueError, match="registered twice"):
        ir.register(ops["math.add"])
    with pytest.raises(ValueError, match="must be 'family.name'"):
        OpDef("noname", lambda ins, a: ins, 1)


def test_arity_messages():
    with pytest.raises(GraphError, match="math.add takes 2 inputs, got 3"):
        ir.get_op("math.add").check_arity(3)
    with pytest.raises(GraphError, match="shape.concat takes 1.. inputs, got 0"):
        ir.get_op("shape.concat").check_arity(0)
    with pytest.raises(GraphError, match="nn.layer_norm takes 1..3 inputs, got 4"):
        ir.get_op("nn.layer_norm").check_arity(4)
