"""VJP rules for nn.*: softmax, norms, embedding, convolution, pooling, dropout."""

from __future__ import annotations

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import count, reshape, sum_axes, where, zero, zeros
from caramba.autodiff.rules.shape import dilate, pad, place
from caramba.ops._define import norm_axis


@rule("nn.softmax")
def softmax(c, ct):
    y = c.y[0]
    axis = norm_axis(c.attrs["axis"], y.ndim)
    return (y * (ct - sum_axes(ct * y, (axis,), keepdims=True)),)


@rule("nn.log_softmax")
def log_softmax(c, ct):
    y = c.y[0]
    axis = norm_axis(c.attrs["axis"], y.ndim)
    return (ct - ops.exp(y) * sum_axes(ct, (axis,), keepdims=True),)


def _normalized_grad(g, xhat, rstd, axes, centered: bool):
    """dx of xhat = (x - mean) * rstd (centered) or x * rstd, given g = dL/dxhat."""
    n = 1.0 / count(g.shape, axes)
    proj = sum_axes(g * xhat, axes, keepdims=True) * n
    out = g - xhat * proj
    if centered:
        out = out - sum_axes(g, axes, keepdims=True) * n
    return out * rstd


def _affine_grads(c, ct, xhat, lead):
    """Cotangents of gamma and beta (shape x.shape[axis:]): sums over the leading axes."""
    out = []
    if len(c.x) > 1:
        out.append(reshape(sum_axes(ct * xhat, lead), c.x[1].shape) if c.needs[1] else None)
    if len(c.x) > 2:
        out.append(reshape(sum_axes(ct, lead), c.x[2].shape) if c.needs[2] else None)
    return out


def _norm(c, ct, centered: bool):
    x = c.x[0]
    axis = norm_axis(c.attrs["axis"], x.ndim)
    axes = tuple(range(axis, x.ndim))
    lead = tuple(range(axis))
    eps = c.attrs["eps"]
    if centered:
        xc = x - ops.mean(x, axes=axes, keepdims=True)
        var = ops.mean(xc * xc, axes=axes, keepdims=True)
    else:
        xc = x
        var = ops.mean(x * x, axes=axes, keepdims=True)
    rstd = ops.rsqrt(var + eps)
    xhat = xc * rstd
    g = ct * c.x[1] if len(c.x) > 1 else ct
    dx = _normalized_grad(g, xhat, rstd, axes, centered) if c.needs[0] else None
    return (dx, *_affine_grads(c, ct, xhat, lead))


@rule("nn.layer_norm")
def layer_norm(c, ct):
    return _norm(c, ct, centered=True)


@rule("nn.rms_norm")
def rms_norm(c, ct):
    return _norm(c, ct, centered=False)


@rule("nn.group_norm")
def group_norm(c, ct):
    x = c.x[0]
    n, ch = x.shape[:2]
    groups = c.attrs["num_groups"]
    grouped = (n, groups, x.type.size // (n * groups) if n * groups else 0)
    bshape = (1, ch) + (1,) * (x.ndim - 2)
    xg = reshape(x, grouped)
    xc = xg - ops.mean(xg, axes=(2,), keepdims=True)
    rstd = ops.rsqrt(ops.mean(xc * xc, axes=(2,), keepdims=True) + c.attrs["eps"])
    xhat = xc * rstd
    g = ct * reshape(c.x[1], bshape) if len(c.x) > 1 else ct
    dx = None
    if c.needs[0]:
        dx = reshape(_normalized_grad(reshape(g, grouped), xhat, rstd, (2,), True), x.shape)
    red = (0,) + tuple(range(2, x.ndim))
    out = [dx]
    if len(c.x) > 1:
        out.append(sum_axes(ct * reshape(xhat, x.shape), red) if c.needs[1] else None)
    if len(c.x) > 2:
        out.append(sum_axes(ct, red) if c.needs[2] else None)
    return tuple(out)


@rule("nn.embedding")
def embedding(c, ct):
    ids, table = c.x
    return (None, ops.scatter_add(zeros(ct, table.shape), ids, ct, axis=0))


# ---- convolution ------------------------------------------------------------------------


def _per_dim(v, nd):
    return tuple(v) * nd if len(v) == 1 else tuple(v)


def _conv_call(nd, x, w, stride, padding, dilation, groups):
    op = ops.conv1d if nd == 1 else ops.conv2d
    return op(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)


def _conv(c, ct, nd):
    x, w = c.x[0], c.x[1]
    stride, padding, dilation = (_per_dim(c.attrs[k], nd) for k in ("stride", "padding", "dilation"))
    groups = c.attrs["groups"]
    n, ch = x.shape[:2]
    o, cg = w.shape[:2]
    og = o // groups
    ks = w.shape[2:]
    sp = tuple(range(2, 2 + nd))
    dx = dw = db = None
    if c.needs[0]:
        # Transposed convolution: dilate ct by the stride, pad it fully, correlate with the
        # flipped kernel whose in/out channels are swapped within each group.
        ctd = ct
        for i in range(nd):
            ctd = dilate(ctd, 2 + i, stride[i])
        pads = [0, 0, 0, 0]
        for i in range(nd):
            full = x.shape[2 + i] + 2 * padding[i]
            edge = dilation[i] * (ks[i] - 1)
            pads += [edge, full - ctd.shape[2 + i]]
        ctd = pad(ctd, pads)
        wt = reshape(w, (groups, og, cg) + ks)
        wt = ops.transpose(wt, perm=(0, 2, 1) + tuple(range(3, 3 + nd)))
        wt = ops.flip(reshape(wt, (ch, og) + ks), axes=tuple(range(2, 2 + nd)))
        dxp = _conv_call(nd, ctd, wt, (1,), (0,), dilation, groups)
        if any(padding):
            dxp = ops.slice(
                dxp,
                starts=tuple(padding),
                ends=tuple(p + x.shape[2 + i] for i, p in enumerate(padding)),
                axes=sp,
            )
        dx = dxp
    if c.needs[1]:
        # Weight gradient: a convolution of the input (batch and channel roles swapped) with
        # ct as the kernel; stride and dilation trade places.
        xs = reshape(x, (n, groups, cg) + x.shape[2:])
        xs = ops.transpose(xs, perm=(2, 1, 0) + tuple(range(3, 3 + nd)))
        xs = reshape(xs, (cg, groups * n) + x.shape[2:])
        cts = ops.transpose(ct, perm=(1, 0) + sp)
        dwt = _conv_call(nd, xs, cts, dilation, padding, stride, groups)  # [C/g, O, K'...]
        if dwt.shape[2:] != ks:
            dwt = ops.slice(dwt, starts=(0,) * nd, ends=ks, axes=sp)
        dw = ops.transpose(dwt, perm=(1, 0) + sp)
    if len(c.x) == 3 and c.needs[2]:
        db = sum_axes(ct, (0,) + sp)
    return (dx, dw) if len(c.x) == 2 else (dx, dw, db)


@rule("nn.conv1d")
def conv1d(c, ct):
    return _conv(c, ct, 1)


@rule("nn.conv2d")
def conv2d(c, ct):
    return _conv(c, ct, 2)


# ---- pooling ----------------------------------------------------------------------------


def _pool_params(c):
    k = _per_dim(c.attrs["kernel"], 2)
    s = k if c.attrs["stride"] is None else _per_dim(c.attrs["stride"], 2)
    p = _per_dim(c.attrs["padding"], 2)
    return k, s, p


def _pool(c, ct, is_max: bool):
    x, out = c.x[0], c.y[0]
    k, s, p = _pool_params(c)
    n, ch, h, w = x.shape
    ho, wo = out.shape[2:]
    full = (n, ch, h + 2 * p[0], w + 2 * p[1])
    xp, taken = x, None
    if is_max:
        # Padding counts as -inf in the forward pass, so it never takes the cotangent.
        if any(p):
            xp = ops.pad(x, pads=(0, 0, 0, 0, p[0], p[0], p[1], p[1]), value=float("-inf"))
    else:
        ct = ct * (1.0 / (k[0] * k[1]))
    total = None
    for i in range(k[0]):
        for j in range(k[1]):
            plan = [(0, n, 1), (0, ch, 1), (i, i + (ho - 1) * s[0] + 1, s[0]), (j, j + (wo - 1) * s[1] + 1, s[1])]
            part = ct
            if is_max:
                win = ops.slice(xp, starts=(plan[2][0], plan[3][0]), ends=(plan[2][1], plan[3][1]),
                                steps=(s[0], s[1]), axes=(2, 3))
                hit = ops.equal(win, out)
                if taken is not None:  # the first maximum of a window takes the cotangent
                    hit = ops.logical_and(hit, ops.logical_not(taken))
                    taken = ops.logical_or(taken, hit)
                else:
                    taken = hit
                part = where(hit, ct, zero(ct))
            placed = place(part, full, plan)
            total = placed if total is None else total + placed
    if any(p):
        total = ops.slice(total, starts=(p[0], p[1]), ends=(p[0] + h, p[1] + w), axes=(2, 3))
    return (total,)


@rule("nn.max_pool2d")
def max_pool2d(c, ct):
    return _pool(c, ct, is_max=True)


@rule("nn.avg_pool2d")
def avg_pool2d(c, ct):
    return _pool(c, ct, is_max=False)


@rule("nn.dropout")
def dropout(c, ct):
    # The same (seed, key) redraws the same mask, so dropout of the cotangent is its VJP.
    key = c.x[1:]
    return (c.call("nn.dropout", (ct, *key), dict(c.attrs)), *(None for _ in key))

