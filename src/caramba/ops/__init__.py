"""caramba.ops: every op, by family. ``from caramba import ops; ops.gelu(x)``."""

# fused: the forms the compiler's fuse pass produces; train: losses, metrics, optimizer updates
from caramba.ops import activation, attention, fused, graph, linalg, math, nn, random, reduce, shape, state, train
from caramba.ops.activation import elu, gelu, leaky_relu, relu, selu, sigmoid, silu, softplus, swiglu
from caramba.ops.attention import rope, sdpa
from caramba.ops.linalg import matmul, outer
from caramba.ops.math import (
    abs,
    add,
    cast,
    ceil,
    clamp,
    cos,
    div,
    equal,
    erf,
    exp,
    expm1,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    mul,
    neg,
    not_equal,
    pow,
    reciprocal,
    round,
    rsqrt,
    sign,
    sin,
    sqrt,
    square,
    sub,
    tanh,
    where,
)
from caramba.ops.nn import (
    avg_pool2d,
    conv1d,
    conv2d,
    dropout,
    embedding,
    group_norm,
    layer_norm,
    log_softmax,
    max_pool2d,
    rms_norm,
    softmax,
)
from caramba.ops.random import bernoulli, normal, uniform
from caramba.ops.reduce import argmax, argmin, logsumexp, max, mean, min, prod, sum, variance
from caramba.ops.shape import (
    broadcast_to,
    concat,
    expand_dims,
    flip,
    gather,
    iota,
    last_token,
    merge_heads,
    pad,
    reshape,
    scatter_add,
    slice,
    split,
    squeeze,
    transpose,
    upsample_nearest,
    view_as_heads,
)

FAMILIES = (graph, state, math, activation, reduce, linalg, shape, nn, attention, random, fused, train)
