"""Numba loops for convolution and pooling (``conv.py``, ``pool.py``; imported only when Numba is present).

``im2col`` gathers the receptive fields of a [N, C, H, W] input into the columns a BLAS GEMM
multiplies by the [O, C*KH*KW] weight matrix; the pooling loops are one pass over the output,
each window read where it lies (no padded copy, no window view). All loops work in the input's
own dtype (float32 stays float32) and compiled code is cached on disk.
"""

from __future__ import annotations

from caramba.backends.cpu import jitcache

jitcache.setup()  # Numba's disk cache in the user cache, before any cached function is defined

import numpy as np  # noqa: E402
from numba import njit, uint64  # noqa: E402

JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(inline="always")
def _range(off, step, size, n):
    """[lo, hi): the o in [0, n) with o*step + off in [0, size)."""
    lo = 0
    if off < 0:
        lo = (-off + step - 1) // step
    hi = 0
    if size - off > 0:
        hi = (size - off + step - 1) // step
    lo = min(lo, n)
    return lo, max(min(hi, n), lo)


@njit(inline="always")
def _span(start, step, dil, k, size, n_out):
    """[lo, hi): the outputs o (0 <= o < n_out) whose tap ``o*step - start + k*dil`` lies in
    [0, size) (``start`` is the padding)."""
    return _range(k * dil - start, step, size, n_out)


@njit(inline="always")
def _run(cf, d, xf, src, step, lo, hi, n, zero):
    """One run of the columns: cf[d + k] = xf[src + k*step] for k in [lo, hi), ``zero`` for the
    other k in [0, n) (the taps in the padding). Unsigned offsets: Numba then checks no
    negative index, and the copies vectorize."""
    for k in range(lo):
        cf[d + uint64(k)] = zero
    for k in range(lo, hi):
        cf[d + uint64(k)] = xf[uint64(src + k * step)]
    for k in range(hi, n):
        cf[d + uint64(k)] = zero


@njit(inline="always")
def _shifted(cf, d, xf, src, ylo, yhi, xlo, xhi, ho, wo, zero):
    """One tap's columns when the output is as wide as the input at stride 1: cf[d + t] =
    xf[src + t] for the outputs t = oy*wo + ox inside the image (rows [ylo, yhi), columns
    [xlo, xhi)), ``zero`` for the others. The inside rows are one contiguous copy, from the first
    inside element to the last (every source index in between lies in the plane), whose
    elements in the padding's columns are then overwritten with ``zero``."""
    if ylo >= yhi or xlo >= xhi:
        for t in range(ho * wo):
            cf[d + uint64(t)] = zero
        return
    t0, t1 = ylo * wo + xlo, (yhi - 1) * wo + xhi
    for t in range(t0):
        cf[d + uint64(t)] = zero
    for t in range(t0, t1):
        cf[d + uint64(t)] = xf[uint64(src + t)]
    for t in range(t1, ho * wo):
        cf[d + uint64(t)] = zero
    if xlo > 0 or xhi < wo:
        for oy in range(ylo, yhi):
            for ox in range(xlo):
                cf[d + uint64(oy * wo + ox)] = zero
            for ox in range(xhi, wo):
                cf[d + uint64(oy * wo + ox)] = zero


@njit(inline="always")
def _columns(xf, xsn, xsc, h, w, cf, csr, csm, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero, back):
    """``im2col`` (``back`` False) or its adjoint ``col2im`` (``back`` True): one loop nest over
    the taps (image, channel, kernel row and column), one run along the output's width per row."""
    # stride 1 with the output as wide as the input: a tap's columns are the input plane shifted
    # by one offset, so its rows are one run (then the padding's columns set to zero)
    whole = not back and sh == 1 and sw == 1 and wo == w
    # each kernel row's and column's span of outputs, once (integer divisions: not per tap)
    ys, xs = np.empty((kh, 2), np.int64), np.empty((kw, 2), np.int64)
    for i in range(kh):
        ys[i, 0], ys[i, 1] = _span(ph, sh, dh, i, h, ho)
    for j in range(kw):
        xs[j, 0], xs[j, 1] = _span(pw, sw, dw, j, w, wo)
    for n in range(n0, n1):
        for c in range(cg):
            xb = n * xsn + (c0 + c) * xsc
            for i in range(kh):
                ylo, yhi = ys[i, 0], ys[i, 1]
                for j in range(kw):
                    db = ((c * kh + i) * kw + j) * csr + (n - n0) * csm
                    xlo, xhi = xs[j, 0], xs[j, 1]
                    if whole:
                        _shifted(cf, uint64(db), xf, xb + (i * dh - ph) * w + j * dw - pw, ylo, yhi, xlo, xhi, ho, wo, zero)
                        continue
                    for oy in range(ylo if back else 0, yhi if back else ho):
                        src = xb + (oy * sh - ph + i * dh) * w + j * dw - pw
                        d = uint64(db + oy * wo)
                        if back:
                            for ox in range(xlo, xhi):
                                xf[uint64(src + ox * sw)] += cf[d + uint64(ox)]
                        else:
                            inside = ylo <= oy < yhi
                            _run(cf, d, xf, src, sw, xlo if inside else 0, xhi if inside else 0, wo, zero)


@njit(**JIT)
def im2col(xf, xsn, xsc, h, w, cf, csr, csm, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero):
    """Columns of a convolution: cols[r, n - n0, oy*wo + ox] = x[n, c0 + c, oy*sh - ph + i*dh,
    ox*sw - pw + j*dw] (``zero`` where that lies in the padding), r = (c*kh + i)*kw + j, for
    the images n in [n0, n1) and the ``cg`` channels from ``c0``.

    Flat buffers with element strides: ``xf`` holds x [N, C, h, w], each [h, w] plane
    C-contiguous, with element strides ``xsn``, ``xsc`` of an image and a channel; ``cf`` holds
    cols with strides ``csr`` (a row r) and ``csm`` (an image), each image's row of ``ho*wo``
    elements contiguous: one ``_run`` along the output's width per output row."""
    _columns(xf, xsn, xsc, h, w, cf, csr, csm, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero, False)


@njit(**JIT)
def im2row(xf, xsn, xsc, h, w, cf, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero):
    """The transposed columns: rows[(n - n0)*ho*wo + oy*wo + ox, (c*kh + i)*kw + j] = x[n, c0 + c,
    oy*sh - ph + i*dh, ox*sw - pw + j*dw] (``zero`` in the padding), for images n in [n0, n1):
    one ``_run`` of ``kw`` along a kernel row, so this is the layout for kernels wider than the
    output (the weight gradient's convolution, whose kernel is the cotangent). ``xf``: x as for
    ``im2col``; ``cf``: the C-contiguous rows, flat."""
    r = cg * kh * kw
    for n in range(n0, n1):
        for oy in range(ho):
            ilo, ihi = _range(oy * sh - ph, dh, h, kh)
            for ox in range(wo):
                off = ox * sw - pw
                jlo, jhi = _range(off, dw, w, kw)
                rb = ((n - n0) * ho * wo + oy * wo + ox) * r
                for c in range(cg):
                    xb = n * xsn + (c0 + c) * xsc
                    for i in range(kh):
                        inside = ilo <= i < ihi
                        _run(cf, uint64(rb + (c * kh + i) * kw), xf, xb + (oy * sh - ph + i * dh) * w + off, dw,
                             jlo if inside else 0, jhi if inside else 0, kw, zero)


@njit(**JIT)
def col2im(cf, csr, csm, xf, xsn, xsc, h, w, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo):
    """The adjoint of ``im2col`` (the transposed convolution's scatter): x[n, c0 + c, oy*sh - ph +
    i*dh, ox*sw - pw + j*dw] += cols[r, n - n0, oy*wo + ox] for every tap that lies inside the
    image (taps in the padding are dropped), r = (c*kh + i)*kw + j, same strides as ``im2col``;
    ``xf`` is the flat, C-contiguous x, zeroed by the caller. Each x element sums its taps in
    the order (i, j)."""
    _columns(xf, xsn, xsc, h, w, cf, csr, csm, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, xf[0], True)


@njit(inline="always")
def _pool_rows(x, out, p0, p1, kh, kw, sh, sw, ph, pw, init, is_max):
    """out[plane, oy, :] = ``init``, then every tap (iy, j) of the windows merged into the whole
    output row at once, taps inside the image only, in each window's row-major order (the
    order a window-by-window loop visits them, so the same result bit for bit). Each plane is
    first split into its ``sw`` column phases (ph[r, iy, k] = x[iy, k*sw + r]), so a tap reads a
    contiguous run: the merges vectorize along the row (unsigned offsets: no negative-index
    branch)."""
    h, w = x.shape[1], x.shape[2]
    ho, wo = out.shape[1], out.shape[2]
    wq = (w + sw - 1) // sw
    phases = np.empty(sw * h * wq, x.dtype)
    xf, of = x.reshape(-1), out.reshape(-1)
    for p in range(p0, p1):
        xb = p * h * w
        for iy in range(h):
            for r in range(min(sw, w)):
                d, src = uint64((r * h + iy) * wq), xb + iy * w + r
                for k in range((w - r + sw - 1) // sw):
                    phases[d + uint64(k)] = xf[uint64(src + k * sw)]
        for oy in range(ho):
            y0 = oy * sh - ph
            ob = uint64((p * ho + oy) * wo)
            for ox in range(wo):
                of[ob + uint64(ox)] = init
            for iy in range(max(y0, 0), min(y0 + kh, h)):
                for j in range(kw):
                    off = j - pw
                    q, r = off // sw, off % sw  # x[iy, ox*sw + off] = phases[r, iy, ox + q]
                    lo, hi = _range(off, sw, w, wo)
                    sb = (r * h + iy) * wq + q
                    if is_max:
                        for ox in range(lo, hi):
                            v = phases[uint64(sb + ox)]
                            m = of[ob + uint64(ox)]
                            # larger, or the first NaN (a later NaN does not replace it)
                            of[ob + uint64(ox)] = v if (v > m) | ((v != v) & (m == m)) else m
                    else:
                        for ox in range(lo, hi):
                            of[ob + uint64(ox)] += phases[uint64(sb + ox)]


@njit(**JIT)
def max_pool(x, out, p0, p1, kh, kw, sh, sw, ph, pw, neg_inf):
    """out[plane, oy, ox] = max of x[plane]'s window (padding is -inf, the first NaN in the
    window's row-major order wins) over the planes [p0, p1) of x [P, H, W]; ``neg_inf`` is -inf
    in x's dtype. Ties keep the first element (-0.0 before 0.0 stays -0.0)."""
    _pool_rows(x, out, p0, p1, kh, kw, sh, sw, ph, pw, neg_inf, True)


@njit(**JIT)
def avg_pool(x, out, p0, p1, kh, kw, sh, sw, ph, pw, count, zero):
    """out[plane, oy, ox] = (sum of x[plane]'s window, padding as 0, from ``zero`` in the
    window's row-major order) / count over the planes [p0, p1) of x [P, H, W]; ``count``
    (kh*kw) and ``zero`` are scalars of x's dtype."""
    _pool_rows(x, out, p0, p1, kh, kw, sh, sw, ph, pw, zero, False)
    ho, wo = out.shape[1], out.shape[2]
    for p in range(p0, p1):
        for oy in range(ho):
            for ox in range(wo):
                out[p, oy, ox] = out[p, oy, ox] / count


@njit(**JIT)
def max_pool_grad(x, y, ct, dx, p0, p1, kh, kw, sh, sw, ph, pw, neg_inf):
    """dx of ``max_pool`` over the planes [p0, p1) of x [P, H, W] given its output y and
    cotangent ct [P, Ho, Wo]: each window's first element (row-major, padding as -inf) equal to
    its maximum takes the window's cotangent (a padded one drops it; a NaN window gives none).
    Windows are visited last to first, so each dx element adds its windows' cotangents in the
    order the VJP rule's sum of k*k placements does (by kernel offset). dx is zeroed by the
    caller."""
    h, w = x.shape[1], x.shape[2]
    ho, wo = y.shape[1], y.shape[2]
    for p in range(p0, p1):
        for oy in range(ho - 1, -1, -1):
            y0 = oy * sh - ph
            for ox in range(wo - 1, -1, -1):
                x0 = ox * sw - pw
                m = y[p, oy, ox]
                done = False
                for i in range(kh):
                    iy = y0 + i
                    for j in range(kw):
                        ix = x0 + j
                        inside = 0 <= iy < h and 0 <= ix < w
                        v = x[p, iy, ix] if inside else neg_inf
                        if v == m:
                            if inside:
                                dx[p, iy, ix] += ct[p, oy, ox]
                            done = True
                            break
                    if done:
                        break


@njit(**JIT)
def avg_pool_grad(ct, dx, p0, p1, kh, kw, sh, sw, ph, pw, scale):
    """dx of ``avg_pool`` over the planes [p0, p1): ct[p, oy, ox] * scale (1/(kh*kw), rounded
    once as the rule's product) added to every element of the window inside the image, windows
    last to first (the VJP rule's order of summation, as ``max_pool_grad``); dx zeroed by the
    caller."""
    h, w = dx.shape[1], dx.shape[2]
    ho, wo = ct.shape[1], ct.shape[2]
    for p in range(p0, p1):
        for oy in range(ho - 1, -1, -1):
            y0 = oy * sh - ph
            ya, yb = max(y0, 0), min(y0 + kh, h)
            for ox in range(wo - 1, -1, -1):
                x0 = ox * sw - pw
                xa, xb = max(x0, 0), min(x0 + kw, w)
                v = ct[p, oy, ox] * scale
                for iy in range(ya, yb):
                    for ix in range(xa, xb):
                        dx[p, iy, ix] += v
