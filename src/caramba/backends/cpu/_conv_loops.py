"""Numba loops for convolution and pooling (``conv.py``, ``pool.py``; imported only when Numba is present).

``im2col`` gathers the receptive fields of a [N, C, H, W] input into the columns a BLAS GEMM
multiplies by the [O, C*KH*KW] weight matrix; the pooling loops are one pass over the output,
each window read where it lies (no padded copy, no window view). All loops work in the input's
own dtype (float32 stays float32) and compiled code is cached on disk.
"""

from __future__ import annotations

from caramba.backends.cpu import jitcache

jitcache.setup()  # Numba's disk cache in the user cache, before any cached function is defined

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


@njit(**JIT)
def im2col(xf, xsn, xsc, h, w, cf, csr, csm, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero):
    """Columns of a convolution: cols[r, n - n0, oy*wo + ox] = x[n, c0 + c, oy*sh - ph + i*dh,
    ox*sw - pw + j*dw] (``zero`` where that lies in the padding), r = (c*kh + i)*kw + j, for
    the images n in [n0, n1) and the ``cg`` channels from ``c0``.

    Flat buffers with element strides, indexed by unsigned offsets (Numba then checks no
    negative index, and the row copies vectorize): ``xf`` holds x [N, C, h, w], each [h, w]
    plane C-contiguous, with element strides ``xsn``, ``xsc`` of an image and a channel; ``cf``
    holds cols with strides ``csr``
    (a row r) and ``csm`` (an image), each image's row of ``ho*wo`` elements contiguous."""
    for n in range(n0, n1):
        m = n - n0
        for c in range(cg):
            xb = n * xsn + (c0 + c) * xsc
            for i in range(kh):
                ylo, yhi = _span(ph, sh, dh, i, h, ho)
                for j in range(kw):
                    r = (c * kh + i) * kw + j
                    db = r * csr + m * csm
                    xlo, xhi = _span(pw, sw, dw, j, w, wo)
                    ix0 = j * dw - pw
                    for oy in range(ho):
                        d = uint64(db + oy * wo)
                        if oy < ylo or oy >= yhi:
                            for ox in range(wo):
                                cf[d + uint64(ox)] = zero
                            continue
                        src = xb + (oy * sh - ph + i * dh) * w + ix0
                        for ox in range(xlo):
                            cf[d + uint64(ox)] = zero
                        for ox in range(xlo, xhi):
                            cf[d + uint64(ox)] = xf[uint64(src + ox * sw)]
                        for ox in range(xhi, wo):
                            cf[d + uint64(ox)] = zero


@njit(**JIT)
def im2row(xf, xsn, xsc, h, w, cf, n0, n1, c0, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero):
    """The transposed columns: rows[(n - n0)*ho*wo + oy*wo + ox, (c*kh + i)*kw + j] = x[n, c0 + c,
    oy*sh - ph + i*dh, ox*sw - pw + j*dw] (``zero`` in the padding), for images n in [n0, n1):
    runs of ``kw`` along a row, so this is the layout for kernels wider than the output (the
    weight gradient's convolution, whose kernel is the cotangent). ``xf``: x as for ``im2col``;
    ``cf``: the C-contiguous rows, flat."""
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
                        d = uint64(rb + (c * kh + i) * kw)
                        if i < ilo or i >= ihi:
                            for j in range(kw):
                                cf[d + uint64(j)] = zero
                            continue
                        src = xb + (oy * sh - ph + i * dh) * w + off
                        for j in range(jlo):
                            cf[d + uint64(j)] = zero
                        for j in range(jlo, jhi):
                            cf[d + uint64(j)] = xf[uint64(src + j * dw)]
                        for j in range(jhi, kw):
                            cf[d + uint64(j)] = zero


@njit(**JIT)
def max_pool(x, out, p0, p1, kh, kw, sh, sw, ph, pw, neg_inf):
    """out[plane, oy, ox] = max of x[plane]'s window (padding is -inf, a NaN wins) over the
    planes [p0, p1) of x [P, H, W]; ``neg_inf`` is -inf in x's dtype."""
    h, w = x.shape[1], x.shape[2]
    ho, wo = out.shape[1], out.shape[2]
    for p in range(p0, p1):
        for oy in range(ho):
            y0 = oy * sh - ph
            ya, yb = max(y0, 0), min(y0 + kh, h)
            for ox in range(wo):
                x0 = ox * sw - pw
                xa, xb = max(x0, 0), min(x0 + kw, w)
                m = neg_inf
                for iy in range(ya, yb):
                    for ix in range(xa, xb):
                        v = x[p, iy, ix]
                        if v > m or v != v:
                            m = v
                            if v != v:
                                break
                    if m != m:
                        break
                out[p, oy, ox] = m


@njit(**JIT)
def avg_pool(x, out, p0, p1, kh, kw, sh, sw, ph, pw, count, zero):
    """out[plane, oy, ox] = (sum of x[plane]'s window, padding as 0) / count over the planes
    [p0, p1) of x [P, H, W]; ``count`` (kh*kw) and ``zero`` are scalars of x's dtype."""
    h, w = x.shape[1], x.shape[2]
    ho, wo = out.shape[1], out.shape[2]
    for p in range(p0, p1):
        for oy in range(ho):
            y0 = oy * sh - ph
            ya, yb = max(y0, 0), min(y0 + kh, h)
            for ox in range(wo):
                x0 = ox * sw - pw
                xa, xb = max(x0, 0), min(x0 + kw, w)
                s = zero
                for iy in range(ya, yb):
                    for ix in range(xa, xb):
                        s += x[p, iy, ix]
                out[p, oy, ox] = s / count
