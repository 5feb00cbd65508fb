"""VJP rules for vsa.*: binding's transpose is correlation (HRR) or the product (MAP);
permutations transpose to their inverse; see caramba.ops.vsa."""

from __future__ import annotations

from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import broadcast, reshape, sum_axes, unbroadcast, zeros


@rule("vsa.bind")
def bind(c, ct):
    a, b = c.x
    model, unbind = c.attrs["model"], c.attrs["unbind"]
    da = db = None
    if model == "map":
        da = unbroadcast(ct * b, a.shape) if c.needs[0] else None
        db = unbroadcast(ct * a, b.shape) if c.needs[1] else None
        return da, db
    conv, corr = {"model": "hrr", "unbind": False}, {"model": "hrr", "unbind": True}
    if not unbind:  # y = a (*) b: da = b (x) ct, db = a (x) ct
        if c.needs[0]:
            da = unbroadcast(c.call("vsa.bind", (b, ct), corr), a.shape)
        if c.needs[1]:
            db = unbroadcast(c.call("vsa.bind", (a, ct), corr), b.shape)
    else:  # y = a (x) b: da = ct (x) b, db = ct (*) a
        if c.needs[0]:
            da = unbroadcast(c.call("vsa.bind", (ct, b), corr), a.shape)
        if c.needs[1]:
            db = unbroadcast(c.call("vsa.bind", (ct, a), conv), b.shape)
    return da, db


@rule("vsa.bundle")
def bundle(c, ct):
    x = c.x[0]
    if c.attrs["model"] == "map":
        return (zeros(x),)
    axis = c.attrs["axis"] % x.ndim
    kept = tuple(1 if i == axis else s for i, s in enumerate(x.shape))
    return (broadcast(reshape(ct, kept), x.shape),)


@rule("vsa.permute")
def permute(c, ct):
    return (c.call("vsa.inverse_permute", (ct,), {"shift": c.attrs["shift"]}),)


@rule("vsa.inverse_permute")
def inverse_permute(c, ct):
    return (c.call("vsa.permute", (ct,), {"shift": c.attrs["shift"]}),)


@rule("vsa.similarity")
def similarity(c, ct):
    # s = <a, b> / (|a| |b|): ds/da = b / (|a| |b|) - s a / |a|^2 (0 where a norm is 0)
    a, b = c.x
    s = c.y[0]
    last = (-1 % max(a.ndim, 1),)
    na2 = sum_axes(a * a, last, keepdims=True)
    nb2 = sum_axes(b * b, (-1 % max(b.ndim, 1),), keepdims=True)
    zero = zeros(na2, ())
    one = zero + 1.0
    den = c.call("math.sqrt", (na2 * nb2,))
    ok = c.call("math.greater", (den, zero))
    inv_den = c.call("math.where", (ok, 1.0 / c.call("math.where", (ok, den, one)), zero))
    ok_a = c.call("math.greater", (na2, zero))
    ok_b = c.call("math.greater", (nb2, zero))
    inv_a2 = c.call("math.where", (ok_a, 1.0 / c.call("math.where", (ok_a, na2, one)), zero))
    inv_b2 = c.call("math.where", (ok_b, 1.0 / c.call("math.where", (ok_b, nb2, one)), zero))
    g = c.call("shape.expand_dims", (ct,), {"axes": (-1 % (ct.ndim + 1),)})
    sk = c.call("shape.expand_dims", (s,), {"axes": (-1 % (s.ndim + 1),)})
    da = unbroadcast(g * (b * inv_den - sk * a * inv_a2), a.shape) if c.needs[0] else None
    db = unbroadcast(g * (a * inv_den - sk * b * inv_b2), b.shape) if c.needs[1] else None
    return da, db
