"""Initializers (seeded host draws) and the module tree (hierarchical parameter names)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caramba import ir, ops
from caramba.errors import ConfigError
from caramba.train import MLP, Dropout, Embedding, LayerNorm, Linear, Module, Parameter, Sequential, init


def test_same_seed_same_bits_and_names_are_independent_streams():
    a = MLP([8, 16, 4]).initial_values(seed=3)
    b = MLP([8, 16, 4]).initial_values(seed=3)
    c = MLP([8, 16, 4]).initial_values(seed=4)
    for n in a:
        np.testing.assert_array_equal(a[n], b[n])
    assert not np.array_equal(a["layers.0.weight"], c["layers.0.weight"])
    # a parameter's draw depends on its name, not on what else the model holds
    bigger = Sequential(Linear(8, 16), ops.relu, Linear(16, 4), Linear(4, 4)).initial_values(seed=3)
    np.testing.assert_array_equal(bigger["layers.0.weight"], a["layers.0.weight"])


def test_generator_is_philox_keyed_by_seed_and_name():
    g1 = init.generator(5, "w").standard_normal(4)
    g2 = init.generator(5, "w").standard_normal(4)
    np.testing.assert_array_equal(g1, g2)
    assert isinstance(init.generator(5, "w").bit_generator, np.random.Philox)
    with pytest.raises(ConfigError, match="seed must be an int"):
        init.generator(1.5, "w")


@pytest.mark.parametrize("shape, fans", [((), (1, 1)), ((5,), (5, 5)), ((3, 7), (3, 7)), ((8, 4, 3, 3), (36, 72))])
def test_fans(shape, fans):
    assert init.fans(shape) == fans


def test_distributions_have_their_documented_scale():
    rng = init.generator(0, "big")
    shape = (400, 600)
    w = init.glorot_uniform()(rng, shape)
    assert np.max(np.abs(w)) <= math.sqrt(6 / 1000) and abs(np.std(w) - math.sqrt(2 / 1000)) < 2e-3
    w = init.glorot_normal(gain=2.0)(rng, shape)
    assert abs(np.std(w) - 2 * math.sqrt(2 / 1000)) < 2e-3
    w = init.he_normal()(rng, shape)
    assert abs(np.std(w) - math.sqrt(2 / 400)) < 2e-3
    w = init.he_uniform(mode="fan_out")(rng, shape)
    assert np.max(np.abs(w)) <= math.sqrt(2) * math.sqrt(3 / 600)
    w = init.uniform(-0.5, 0.25)(rng, shape)
    assert w.min() >= -0.5 and w.max() < 0.25
    w = init.normal(1.0, 0.1)(rng, shape, ir.DType.float32)
    assert w.dtype == np.float32 and abs(w.mean() - 1.0) < 1e-2
    assert not init.zeros()(rng, (3,)).any() and (init.ones()(rng, (3,)) == 1).all()
    assert (init.constant(0.5)(rng, (2,)) == 0.5).all()
    assert init.xavier_uniform is init.glorot_uniform and init.kaiming_normal is init.he_normal


@pytest.mark.parametrize("make, message", [
    (lambda: init.normal(std=-1.0), "normal std must be >= 0"),
    (lambda: init.uniform(1.0, 0.0), "uniform needs low <= high"),
    (lambda: init.he_normal(mode="fan_avg"), "mode must be fan_in or fan_out"),
    (lambda: Linear(0, 3), "Linear needs positive sizes"),
    (lambda: MLP([3]), "MLP needs at least"),
    (lambda: Dropout(1.0), "Dropout rate must be in"),
    (lambda: Parameter((2,), dtype="int64"), "parameters are float tensors"),
])
def test_bad_arguments_are_config_errors(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_module_tree_names_parameters_hierarchically():
    class Block(Module):
        def __init__(self, d_in):
            super().__init__()
            self.fc1 = Linear(d_in, 8)
            self.norm = LayerNorm(8)

        def __call__(self, x):
            return self.norm(ops.relu(self.fc1(x)))

    class Net(Module):
        def __init__(self):
            super().__init__(name="encoder")
            self.blocks = [Block(4), Block(8)]
            self.embed = Embedding(10, 4)

        def __call__(self, ids):
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x)
            return x

    net = Net()
    names = list(net.parameters())
    assert names == [
        "encoder.blocks.0.fc1.weight", "encoder.blocks.0.fc1.bias", "encoder.blocks.0.norm.weight",
        "encoder.blocks.0.norm.bias", "encoder.blocks.1.fc1.weight", "encoder.blocks.1.fc1.bias",
        "encoder.blocks.1.norm.weight", "encoder.blocks.1.norm.bias", "encoder.embed.weight",
    ]
    with ir.Graph() as g:
        ids = g.input("ids", (2, 3), "int64")
        out = net(ids)
    assert out.shape == (2, 3, 8)
    assert set(g.state) == set(names)


def test_frozen_parameters_are_listed_but_not_trained():
    lin = Linear(2, 2)
    lin.bias.trainable = False
    assert set(lin.parameters()) == {"weight", "bias"}
    assert set(lin.parameters(trainable_only=True)) == {"weight"}


def test_module_must_call_super_init():
    class Bad(Module):
        def __init__(self):
            self.w = Parameter((2,))

    with pytest.raises(ConfigError, match="must call super"):
        Bad()
