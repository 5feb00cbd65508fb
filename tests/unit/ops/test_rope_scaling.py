"""rope_inv_freq / rope_attention_scale / rope_tables against Hugging Face transformers.

Each rope type is checked twice against transformers' own init function (``ROPE_INIT_FUNCTIONS``,
or the model's ``compute_default_rope_parameters`` for ``default``):

- as transformers ships it, in float32, with a float32 tolerance (``F32``);
- re-derived in float64 by running the same function with its module's ``torch`` swapped for a
  proxy whose ``torch.float`` / ``torch.float32`` are float64 (transformers hard-codes float32,
  so no device/dtype argument gets float64 out of it); then caramba must agree to ~1e-13.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from caramba.errors import CarambaError, ConfigError
from caramba.ops.attention import ROPE_TYPES, rope_attention_scale, rope_inv_freq, rope_tables

transformers = pytest.importorskip("transformers", reason="the Hugging Face references need `transformers` (test extra)")
torch = pytest.importorskip("torch", reason="the Hugging Face references need torch (test extra)")

import transformers.modeling_rope_utils as hf_rope  # noqa: E402
import transformers.models.llama.modeling_llama as hf_llama  # noqa: E402

F32 = 4e-6  # relative: float32 pow at exponents up to ~14 (ln 1e6) loses a few ulps
F64 = 1e-13

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}


class _Float64Torch:
    """``torch`` with float32 spelled float64, for transformers' hard-coded ``torch.float``."""

    float = torch.float64
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def _config(head_dim: int, theta: float, params: dict, max_position: int):
    return transformers.LlamaConfig(
        head_dim=head_dim, hidden_size=head_dim * 4, num_attention_heads=4,
        max_position_embeddings=max_position, rope_parameters={"rope_theta": theta, **params},
    )


def _hf(head_dim, theta, params, max_position, *, seq_len=None, float64=False):
    """transformers' (inv_freq as float64 numpy, attention_factor)."""
    config = _config(head_dim, theta, params, max_position)
    kind = params.get("rope_type", params.get("type", "default"))
    fn = hf_llama.LlamaRotaryEmbedding.compute_default_rope_parameters if kind == "default" else hf_rope.ROPE_INIT_FUNCTIONS[kind]
    with pytest.MonkeyPatch.context() as mp:
        if float64:
            mp.setattr(hf_rope, "torch", _Float64Torch())
            mp.setattr(hf_llama, "torch", _Float64Torch())
        inv, attention = fn(config) if kind == "default" else fn(config, None, seq_len=seq_len)
    assert inv.dtype == (torch.float64 if float64 else torch.float32)
    return inv.numpy().astype(np.float64), float(attention)


def _both(head_dim, theta, params, max_position, ours, **kw):
    """Check ``ours`` against transformers in float32 (F32) and re-derived in float64 (F64)."""
    ref32, att32 = _hf(head_dim, theta, params, max_position, **kw)
    ref64, att64 = _hf(head_dim, theta, params, max_position, float64=True, **kw)
    assert ours.dtype == np.float64 and ours.shape == ref64.shape
    np.testing.assert_allclose(ours, ref32, rtol=F32, atol=0)
    np.testing.assert_allclose(ours, ref64, rtol=F64, atol=0)
    return att32, att64


@pytest.mark.parametrize("head_dim,theta", [(128, 500000.0), (64, 10000.0), (2, 10000.0)])
def test_default(head_dim, theta):
    ours = rope_inv_freq(head_dim, theta)
    _both(head_dim, theta, {}, 4096, ours)
    np.testing.assert_array_equal(rope_inv_freq(head_dim, theta, {"rope_type": "default"}), ours)
    assert rope_attention_scale(None) == rope_attention_scale({"rope_type": "default"}) == 1.0


@pytest.mark.parametrize("key", ["rope_type", "type"])  # the old rope_scaling key too
def test_linear(key):
    params = {key: "linear", "factor": 4.0}
    ours = rope_inv_freq(64, 10000.0, params)
    _both(64, 10000.0, params, 4096, ours)
    np.testing.assert_allclose(ours, rope_inv_freq(64, 10000.0) / 4.0, rtol=0, atol=0)
    assert rope_attention_scale(params) == 1.0


def test_linear_partial_rotary():
    params = {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}
    ours = rope_inv_freq(128, 10000.0, params)
    assert ours.shape == (32,)
    _both(128, 10000.0, params, 4096, ours)


def test_llama3_1():
    """Llama 3.1's numbers: theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192."""
    ours = rope_inv_freq(128, 500000.0, LLAMA31)
    att32, att64 = _both(128, 500000.0, LLAMA31, 131072, ours)
    assert att32 == att64 == rope_attention_scale(LLAMA31) == 1.0
    base = rope_inv_freq(128, 500000.0)
    wavelen = 2 * math.pi / base
    assert np.array_equal(ours[wavelen < 2048], base[wavelen < 2048])  # high frequencies kept
    assert np.array_equal(ours[wavelen > 8192], base[wavelen > 8192] / 8)  # low ones divided by 8
    medium = (wavelen >= 2048) & (wavelen <= 8192)
    assert medium.any() and np.all((ours[medium] < base[medium]) & (ours[medium] > base[medium] / 8))


def test_llama3_original_defaults_to_max_position():
    """transformers' standardization: no original_max_position_embeddings -> max_position_embeddings."""
    params = {k: v for k, v in LLAMA31.items() if k != "original_max_position_embeddings"}
    ours = rope_inv_freq(128, 500000.0, params, max_position=8192)
    _both(128, 500000.0, params, 8192, ours)
    np.testing.assert_array_equal(ours, rope_inv_freq(128, 500000.0, LLAMA31))
    with pytest.raises(ConfigError, match="'llama3' needs 'original_max_position_embeddings' \\(or max_position\\)"):
        rope_inv_freq(128, 500000.0, params)


@pytest.mark.parametrize("seq_len", [None, 100, 4096])
def test_dynamic_within_max_position_is_default(seq_len):
    params = {"rope_type": "dynamic", "factor": 2.0}
    ours = rope_inv_freq(64, 10000.0, params, max_position=4096, seq_len=seq_len)
    _both(64, 10000.0, params, 4096, ours, seq_len=seq_len)
    np.testing.assert_array_equal(ours, rope_inv_freq(64, 10000.0))


@pytest.mark.parametrize("seq_len", [4097, 3 * 4096, 20000])
def test_dynamic_beyond_max_position(seq_len):
    params = {"rope_type": "dynamic", "factor": 2.0}
    ours = rope_inv_freq(64, 10000.0, params, max_position=4096, seq_len=seq_len)
    _both(64, 10000.0, params, 4096, ours, seq_len=seq_len)
    assert np.all(ours[1:] < rope_inv_freq(64, 10000.0)[1:])
    assert rope_attention_scale(params) == 1.0


def test_dynamic_needs_max_position():
    with pytest.raises(ConfigError, match="'dynamic' needs max_position"):
        rope_inv_freq(64, 10000.0, {"rope_type": "dynamic", "factor": 2.0})


YARN = [
    # Qwen2.5-style long context: factor 4 over 32768, theta 1e6.
    ("qwen", 128, 1e6, {"factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    # gpt-oss: factor 32 over 4096, theta 150000, no truncation of the correction range.
    ("gpt-oss", 64, 150000.0, {"factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                               "beta_slow": 1.0, "truncate": False}, 131072),
    # DeepSeek-V3: mscale / mscale_all_dim set the attention factor (here their ratio is 1).
    ("deepseek", 64, 10000.0, {"factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
                               "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}, 163840),
    ("mscale-ratio", 64, 10000.0, {"factor": 16.0, "original_max_position_embeddings": 2048, "mscale": 0.707,
                                   "mscale_all_dim": 1.0}, 32768),
    ("attention-factor", 32, 10000.0, {"factor": 8.0, "original_max_position_embeddings": 1024,
                                       "attention_factor": 1.5, "beta_fast": 16, "beta_slow": 2}, 8192),
    # factor left out: transformers derives max_position_embeddings / original (here 8).
    ("implicit-factor", 64, 1e6, {"factor": None, "original_max_position_embeddings": 4096}, 32768),
]


@pytest.mark.parametrize("name,head_dim,theta,extra,max_position", YARN, ids=[y[0] for y in YARN])
def test_yarn(name, head_dim, theta, extra, max_position):
    params = {"rope_type": "yarn", **extra}
    ours = rope_inv_freq(head_dim, theta, params, max_position=max_position)
    att32, att64 = _both(head_dim, theta, params, max_position, ours)
    scale = rope_attention_scale(params, max_position=max_position)
    assert att64 == att32  # transformers computes the attention factor in Python floats
    assert scale == pytest.approx(att64, rel=1e-15, abs=0)
    if "attention_factor" in extra:
        assert scale == 1.5
    elif "mscale" not in extra:
        factor = extra["factor"] or max_position / extra["original_max_position_embeddings"]
        assert scale == pytest.approx(0.1 * math.log(factor) + 1.0, rel=1e-15)


def test_yarn_attention_scale_is_yarn_only():
    assert rope_attention_scale({"rope_type": "linear", "factor": 8.0}) == 1.0
    assert rope_attention_scale(LLAMA31) == 1.0


@pytest.mark.parametrize("kind", ["longrope", "proportional", "su", "nope"])
def test_unknown_rope_type(kind):
    with pytest.raises(CarambaError) as err:
        rope_inv_freq(64, 10000.0, {"rope_type": kind, "factor": 2.0})
    assert isinstance(err.value, ConfigError)
    assert f"unsupported rope type {kind!r}" in str(err.value)
    assert "default, linear, dynamic, llama3, yarn" in str(err.value)
    assert ROPE_TYPES == ("default", "linear", "dynamic", "llama3", "yarn")
    with pytest.raises(ConfigError, match=f"unsupported rope type {kind!r}"):
        rope_attention_scale({"type": kind})


def test_bad_mappings():
    with pytest.raises(ConfigError, match="does not take low_freq_factor; it takes factor"):
        rope_inv_freq(64, 10000.0, {"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0})
    with pytest.raises(ConfigError, match="names two types"):
        rope_inv_freq(64, 10000.0, {"rope_type": "linear", "type": "dynamic", "factor": 2.0})
    with pytest.raises(ConfigError, match="rope_theta 500000.0 disagrees with base 10000.0"):
        rope_inv_freq(64, 10000.0, {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0})
    with pytest.raises(ConfigError, match="'llama3' needs 'high_freq_factor'"):
        rope_inv_freq(64, 10000.0, {k: v for k, v in LLAMA31.items() if k != "high_freq_factor"})
    with pytest.raises(ConfigError, match="even rotary dim"):
        rope_inv_freq(6, 10000.0, {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5})
    # rope_theta equal to base is fine (transformers 5 keeps it inside rope_parameters)
    rope_inv_freq(64, 10000.0, {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000})


def test_rope_tables_default_is_the_base_formula():
    attrs = {"base": 100.0, "offset": 3, "inv_freq": (), "scale": 1.0}
    cos, sin = rope_tables(attrs, 5, 8)
    angles = (3 + np.arange(5.0))[:, None] * 100.0 ** (-np.arange(4.0) * 2 / 8)
    assert cos.dtype == sin.dtype == np.float64 and cos.shape == (5, 4)
    np.testing.assert_array_equal(cos, np.cos(angles))
    np.testing.assert_array_equal(sin, np.sin(angles))


def test_rope_tables_use_inv_freq_and_scale():
    attrs = {"base": 10000.0, "offset": 2, "inv_freq": (0.5, 0.25), "scale": 1.25}
    cos, sin = rope_tables(attrs, 3, 4)
    angles = (2 + np.arange(3.0))[:, None] * np.array([0.5, 0.25])
    np.testing.assert_allclose(cos, 1.25 * np.cos(angles), rtol=1e-15)
    np.testing.assert_allclose(sin, 1.25 * np.sin(angles), rtol=1e-15)
    with pytest.raises(CarambaError, match="needs dim/2 = 3 frequencies, got 2"):
        rope_tables(attrs, 3, 6)


@pytest.mark.parametrize("params", [LLAMA31, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}],
                         ids=["llama3", "yarn"])
def test_tables_match_hf_rotary_embedding(params):
    """End to end: attention.rope's attrs from rope_inv_freq / rope_attention_scale give the cos and
    sin LlamaRotaryEmbedding computes (it repeats the dim/2 angles twice; float32 there)."""
    head_dim, theta, t_len = 64, 500000.0, 48
    config = _config(head_dim, theta, params, 4096)
    emb = hf_llama.LlamaRotaryEmbedding(config)
    x = torch.zeros(1, t_len, head_dim)
    pos = torch.arange(t_len)[None]
    hf_cos, hf_sin = (t[0].numpy().astype(np.float64) for t in emb(x, pos))
    attrs = {"base": theta, "offset": 0, "inv_freq": tuple(rope_inv_freq(head_dim, theta, params, max_position=4096)),
             "scale": rope_attention_scale(params, max_position=4096)}
    cos, sin = rope_tables(attrs, t_len, head_dim)
    np.testing.assert_allclose(np.concatenate([cos, cos], -1), hf_cos, rtol=0, atol=2e-5)
    np.testing.assert_allclose(np.concatenate([sin, sin], -1), hf_sin, rtol=0, atol=2e-5)


def test_op_attrs_take_the_scaled_frequencies():
    """The op's inference accepts rope_inv_freq's output as inv_freq (dim/2 finite floats)."""
    import caramba.ir as ir
    from caramba import ops

    inv = rope_inv_freq(16, 500000.0, LLAMA31)
    g = ir.Graph("rope")
    with g:
        x = g.input("x", (2, 5, 16), "float32")
        y = ops.rope(x, inv_freq=inv, scale=1.2)
    assert y.shape == (2, 5, 16)
    assert y.node.attrs["inv_freq"] == tuple(float(f) for f in inv) and y.node.attrs["scale"] == 1.2
