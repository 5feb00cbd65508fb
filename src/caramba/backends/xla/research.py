"""xla rules for the research families fft.*, vsa.* and hawkes.*: the definitions in
``caramba.ops.{fft, vsa, hawkes}`` with ``xp = jax.numpy`` (the same steps as the cpu kernels);
the log-likelihood's recursion runs as ``lax.scan`` and the simulation's thinning loop as
``lax.while_loop`` over caramba's counter-based SplitMix64 stream (uint64 arithmetic needs the
x64 mode the runner traces under)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from caramba.backends.xla.lowering import KEY, rule
from caramba.ir.dtypes import DType
from caramba.ops import fft, hawkes, vsa
from caramba.ops.sample import GOLDEN, MIX1, MIX2, U64

# float16 is not claimed: XLA's FFT takes float32/float64 only, and the event recursions need the range
FLOAT = frozenset({DType.float64, DType.float32})
EVENTS = FLOAT | KEY  # int64: marks (and the simulation key)


# ---- fft ----------------------------------------------------------------------------------
@rule("fft.rfft", FLOAT)
def _rfft(node, ins, ctx):
    return lambda x: fft.rfft_xp(x, jnp)


@rule("fft.irfft", FLOAT)
def _irfft(node, ins, ctx):
    n = node.attrs["n"]
    return lambda z: fft.irfft_xp(z, n, jnp)


# ---- vsa ----------------------------------------------------------------------------------
@rule("vsa.bind", FLOAT)
def _bind(node, ins, ctx):
    model, unbind = node.attrs["model"], node.attrs["unbind"]
    shape = np.broadcast_shapes(ins[0].shape, ins[1].shape)

    def bind(a, b):
        if model == "hrr":
            a, b = jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)
        return vsa.bind_xp(a, b, model, unbind, jnp)

    return bind


@rule("vsa.bundle", FLOAT)
def _bundle(node, ins, ctx):
    model, axis = node.attrs["model"], node.attrs["axis"]
    return lambda x: vsa.bundle_xp(x, model, axis, jnp)


@rule("vsa.permute", FLOAT)
def _permute(node, ins, ctx):
    shift = node.attrs["shift"]
    return lambda x: vsa.permute_xp(x, shift, jnp)


@rule("vsa.inverse_permute", FLOAT)
def _inverse_permute(node, ins, ctx):
    shift = node.attrs["shift"]
    return lambda x: vsa.permute_xp(x, -shift, jnp)


@rule("vsa.similarity", FLOAT)
def _similarity(node, ins, ctx):
    return lambda a, b: vsa.similarity_xp(a, b, jnp)


# ---- hawkes -------------------------------------------------------------------------------
def _marks(ctx, node, marks, m):
    ctx.check_range(node, marks, 0, m, f"{node.op}: marks outside [0, {m}) for a process of {m} dimensions")


def _sorted(ctx, node, times):
    if times.shape[-1] > 1:
        unsorted = (jnp.diff(times, axis=-1) < 0).astype(jnp.int64)
        ctx.check_range(node, unsorted, 0, 1, f"{node.op}: event times must be sorted ascending in each sequence")


def scan(step, carry, xs):
    return lax.scan(step, carry, xs)[0]


@rule("hawkes.intensity", EVENTS)
def _intensity(node, ins, ctx):
    def intensity(mu, alpha, beta, times, marks, t):
        _marks(ctx, node, marks, mu.shape[0])
        return hawkes.intensity_xp(mu, alpha, beta, times, marks, t, jnp)

    return intensity


@rule("hawkes.kernel_matrix", EVENTS)
def _kernel_matrix(node, ins, ctx):
    def kernel_matrix(alpha, beta, times, marks):
        _marks(ctx, node, marks, alpha.shape[0])
        return hawkes.kernel_matrix_xp(alpha, beta, times, marks, jnp)

    return kernel_matrix


@rule("hawkes.log_likelihood", EVENTS)
def _log_likelihood(node, ins, ctx):
    def log_likelihood(mu, alpha, beta, times, marks, end):
        _marks(ctx, node, marks, mu.shape[0])
        _sorted(ctx, node, times)
        return hawkes.log_likelihood_xp(mu, alpha, beta, times, marks, end, jnp, scan)

    return log_likelihood


@rule("hawkes.vjp", EVENTS)
def _vjp(node, ins, ctx):
    of = node.attrs["of"]

    def vjp(ct, *xs):
        if of == "kernel_matrix":
            _marks(ctx, node, xs[3], xs[0].shape[0])
            return hawkes.kernel_matrix_xp(*xs, jnp, ct=ct)
        _marks(ctx, node, xs[4], xs[0].shape[0])
        if of == "intensity":
            return hawkes.intensity_xp(*xs, jnp, ct=ct)
        _sorted(ctx, node, xs[3])
        return hawkes.log_likelihood_xp(*xs, jnp, scan, ct=ct)

    return vjp


def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
    return z ^ (z >> np.uint64(31))


def _state(seed: int, key):
    s = jnp.asarray(np.uint64(seed & U64))
    if key is None:
        return _mix(s)
    return _mix(_mix(key.astype(jnp.uint64) + np.uint64(GOLDEN)) ^ s)


def _u(s, i):
    bits = _mix(s + i.astype(jnp.uint64) * np.uint64(GOLDEN))
    return (bits >> np.uint64(11)).astype(jnp.float64) * 2.0**-53


@rule("hawkes.simulate", EVENTS)
def _simulate(node, ins, ctx):
    events, seed = node.attrs["events"], node.attrs["seed"]
    dt = jnp.dtype(ins[0].dtype.numpy)

    def simulate(mu, alpha, beta, key=None):
        if events == 0:
            return jnp.zeros((0,), dt), jnp.zeros((0,), jnp.int64)
        m = mu.shape[0]
        ab = alpha * beta
        s = _state(seed, key)

        def lam_of(r):
            return mu + jnp.sum(ab * r, axis=(-2, -1))

        def cond(c):
            return (c[2] < events) & c[6]  # events left and the process alive

        def body(c):
            t, r, n, k, times, marks, _ = c
            lam = lam_of(r)
            bar = jnp.sum(lam)
            ok = (bar > 0) & jnp.isfinite(bar)
            u1 = _u(s, 2 * k + 1).astype(dt)
            u2 = _u(s, 2 * k + 2).astype(dt)
            w = -jnp.log1p(-u1) / jnp.where(ok, bar, jnp.ones((), dt))
            t2 = t + w
            r2 = r * jnp.exp(-beta * w)
            cum = jnp.cumsum(lam_of(r2))
            level = u2 * bar
            accept = ok & (level < cum[-1])
            mark = jnp.minimum(jnp.sum(cum <= level), m - 1).astype(jnp.int64)
            hit = (jnp.arange(m) == mark)[None, :, None] & accept
            r3 = jnp.where(hit, r2 + 1, r2)
            times = jnp.where(accept, times.at[n].set(t2), times)
            marks = jnp.where(accept, marks.at[n].set(mark), marks)
            return (t2, r3, n + accept.astype(n.dtype), k + 1, times, marks, ok)

        init = (jnp.zeros((), dt), jnp.zeros(alpha.shape, dt), jnp.zeros((), jnp.int64), jnp.zeros((), jnp.int64),
                jnp.full((events,), jnp.inf, dt), jnp.full((events,), -1, jnp.int64), jnp.ones((), bool))
        out = lax.while_loop(cond, body, init)
        return out[4], out[5]

    return simulate
