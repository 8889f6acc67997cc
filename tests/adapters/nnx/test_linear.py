"""adapters.nnx's linear-family layers, LoRA, activations and dtypes against flax.nnx 0.12.8:
the same parameters (names, shapes, dtypes, values) from the same seed, the same outputs,
the same errors."""

import inspect
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx
from flax.nnx.nn import dtypes as flax_dtypes

from adapters import nnx
from adapters.nnx.nn import dtypes, initializers
from adapters.nnx.nn.linear import canonicalize_padding, first_from


def _params(module):
    """``{path: array}`` of every Variable of an nnx module (ours or flax's)."""
    out = {}
    for name, value in sorted(vars(module).items()):
        if isinstance(value, nnx.Variable | fnnx.Variable):
            out[name] = np.asarray(value[...])
        elif isinstance(value, nnx.Module | fnnx.Module):
            out.update({f"{name}.{k}": v for k, v in _params(value).items()})
    return out


def _same(ours, theirs):
    a, b = _params(ours), _params(theirs)
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


CASES = [
    ("Linear", (3, 4), {"use_bias": False}, (2, 3)),
    ("LinearGeneral", ((2, 3), (4, 5)), {"axis": (1, -1)}, (6, 2, 3)),
    ("LinearGeneral", (3, 2), {"batch_axis": {0: 2}, "axis": -1}, (2, 5, 3)),
    ("Einsum", ("nta,hab->nthb", (8, 2, 4), (8, 4)), {}, (3, 5, 2)),
    ("Conv", (4, 6, 3), {"feature_group_count": 2, "padding": "CAUSAL"}, (9, 4)),
    ("ConvTranspose", (3, 2, 2), {"transpose_kernel": True, "param_dtype": jnp.bfloat16}, (5, 3)),
]


@pytest.mark.parametrize(("name", "args", "kwargs", "x_shape"), CASES)
def test_layers_match_flax(name, args, kwargs, x_shape):
    ours = getattr(nnx, name)(*args, **kwargs, rngs=nnx.Rngs(0))
    theirs = getattr(fnnx, name)(*args, **kwargs, rngs=fnnx.Rngs(0))
    _same(ours, theirs)
    x = jax.random.normal(jax.random.key(1), x_shape)
    with jax.numpy_dtype_promotion("standard"):  # Flax's default mode
        y, expected = ours(x), theirs(x)
    assert y.shape == expected.shape and y.dtype == expected.dtype
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_signatures_match_flax():
    names = ["Linear", "LinearGeneral", "Einsum", "Conv", "ConvTranspose", "Embed", "LoRA"]
    names += ["LoRALinear", "Dropout", "PReLU"]
    for name in names:
        ours = inspect.signature(getattr(nnx, name).__init__).parameters
        theirs = inspect.signature(getattr(fnnx, name).__init__).parameters
        assert list(ours) == list(theirs), name
        for p in ours:
            default = theirs[p].default
            if isinstance(default, Mapping):
                assert dict(ours[p].default) == dict(default), (name, p)
            elif not callable(default):
                assert ours[p].default == default, (name, p)
            assert ours[p].kind == theirs[p].kind, (name, p)


def test_linear_dtypes_and_preferred_element_type():
    kw = {"dtype": jnp.float16, "param_dtype": jnp.bfloat16}
    ours = nnx.Linear(3, 2, **kw, preferred_element_type=jnp.float32, rngs=nnx.Rngs(0))
    theirs = fnnx.Linear(3, 2, **kw, preferred_element_type=jnp.float32, rngs=fnnx.Rngs(0))
    _same(ours, theirs)
    x = jnp.ones((1, 3))
    with jax.numpy_dtype_promotion("standard"):
        assert ours(x).dtype == theirs(x).dtype == jnp.float32
        np.testing.assert_array_equal(ours(x), theirs(x))
    gen = nnx.LinearGeneral(3, 2, dot_general_cls=lambda: jax.lax.dot_general, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(gen(x), nnx.Linear(3, 2, rngs=nnx.Rngs(0))(x))


def test_einsum_op_and_call_equation():
    def op(*args, **kwargs):
        return jnp.einsum(*args, **kwargs)[None]

    layer = nnx.Einsum("ab,bc->ac", (3, 4), einsum_op=op, rngs=nnx.Rngs(0))
    assert layer(jnp.ones((2, 3))).shape == (1, 2, 4)
    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs.get("preferred_element_type"))
        return jnp.einsum(*args, **kwargs)

    kw = {"param_dtype": jnp.bfloat16, "preferred_element_type": jnp.float32}
    layer = nnx.Einsum("ab,bc->ac", (3, 4), einsum_op=recording, **kw, rngs=nnx.Rngs(0))
    assert layer(jnp.ones((2, 3), jnp.bfloat16)).dtype == jnp.float32
    assert seen == [jnp.float32]
    layer = nnx.Einsum("ab,bc->ac", (3, 4), (4,), rngs=nnx.Rngs(0))
    y = layer(jnp.ones((2, 3)), "ab, bc -> ac")
    np.testing.assert_allclose(y, jnp.ones((2, 3)) @ layer.kernel[...] + layer.bias[None])


def test_embed_matches_flax_lookup_attend_and_dtype():
    ours = nnx.Embed(7, 3, param_dtype=jnp.float16, rngs=nnx.Rngs(0))
    theirs = fnnx.Embed(7, 3, param_dtype=jnp.float16, rngs=fnnx.Rngs(0))
    _same(ours, theirs)
    assert ours.dtype == jnp.float16
    ids = jnp.array([[0, 6], [-1, 9]])
    np.testing.assert_array_equal(ours(ids), theirs(ids))
    q = jnp.ones((2, 3))
    np.testing.assert_allclose(ours.attend(q), theirs.attend(q), rtol=1e-3)
    one = nnx.Embed(1, 2, rngs=nnx.Rngs(0))
    assert one(jnp.array([3, 4])).shape == (2, 2)


def test_lora_and_lora_linear_match_flax():
    base, fbase = nnx.Linear(3, 4, rngs=nnx.Rngs(5)), fnnx.Linear(3, 4, rngs=fnnx.Rngs(5))
    ours = nnx.LoRA(
        3, 2, 4, base_module=base, b_initializer=nnx.initializers.ones, rngs=nnx.Rngs(1)
    )
    theirs = fnnx.LoRA(
        3, 2, 4, base_module=fbase, b_initializer=fnnx.initializers.ones, rngs=fnnx.Rngs(1)
    )
    _same(ours, theirs)
    x = jax.random.normal(jax.random.key(2), (2, 3))
    np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
    assert isinstance(ours.lora_a, nnx.LoRAParam) and isinstance(ours.lora_a, nnx.Param)
    ours = nnx.LoRALinear(3, 4, lora_rank=2, use_bias=False, rngs=nnx.Rngs(0))
    theirs = fnnx.LoRALinear(3, 4, lora_rank=2, use_bias=False, rngs=fnnx.Rngs(0))
    _same(ours, theirs)
    np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"`self\.base_module` must be callable\."):
        nnx.LoRA(3, 2, 4, base_module=3, rngs=nnx.Rngs(0))(x)  # type: ignore[arg-type]


def test_prelu_matches_flax():
    x = jnp.linspace(-2, 2, 5, dtype=jnp.float16)
    for kw in ({}, {"dtype": jnp.float32}):
        ours, theirs = nnx.PReLU(0.2, **kw), fnnx.PReLU(0.2, **kw)
        _same(ours, theirs)
        assert ours(x).dtype == theirs(x).dtype
        np.testing.assert_array_equal(ours(x), theirs(x))


def test_dropout_view_hook_and_no_deterministic():
    layer = nnx.Dropout(0.5, deterministic=None)
    with pytest.raises(ValueError, match="No `deterministic` argument was provided to Dropout"):
        layer(jnp.ones(2))
    layer.set_view(deterministic=True)
    assert layer.deterministic is True
    layer.set_view()
    assert layer.deterministic is True


def test_dtypes_and_initializers_match_flax():
    x, w = jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.float32)
    with jax.numpy_dtype_promotion("standard"):
        promoted = dtypes.promote_dtype((x, w, None))
        assert promoted[0].dtype == flax_dtypes.promote_dtype((x, w))[0].dtype == jnp.float32
    assert isinstance(promoted, tuple) and promoted[2] is None
    (i,) = dtypes.promote_dtype((jnp.ones(2, jnp.int32),), inexact=False)
    assert i.dtype == jnp.int32
    with pytest.raises(ValueError, match="Dtype must be inexact"):
        dtypes.promote_dtype((x,), dtype=jnp.int32)
    assert initializers.zeros_init() is initializers.zeros
    theirs = {n for n in dir(fnnx.initializers) if not n.startswith("_") and n != "tp"}
    assert theirs <= set(dir(initializers))


def test_errors_match_flax():
    with pytest.raises(ValueError, match="in_features and axis must have the same length"):
        nnx.LinearGeneral((2, 3), 4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"batch_dims \(1,\) must be consecutive leading"):
        nnx.LinearGeneral(2, 4, batch_axis={1: 3}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match='must be explicit and include "->"'):
        nnx.Einsum("ab,bc", (2, 3), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="exactly one comma character, instead of 2"):
        nnx.Einsum("ab,bc,cd->ad", (2, 3), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="Input type must be an integer or unsigned integer"):
        nnx.Embed(3, 2, rngs=nnx.Rngs(0))(jnp.ones(2))
    with pytest.raises(ValueError, match="Mask needs to have the same shape as weights"):
        nnx.Conv(2, 3, 3, mask=jnp.ones((2, 2)), rngs=nnx.Rngs(0))(jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="Mask needs to have the same shape as weights"):
        nnx.ConvTranspose(2, 3, 3, mask=jnp.ones((1,)), rngs=nnx.Rngs(0))(jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="Causal padding is only implemented for 1D"):
        nnx.Conv(2, 3, (2, 2), padding="CAUSAL", rngs=nnx.Rngs(0))(jnp.ones((4, 4, 2)))
    with pytest.raises(ValueError, match=r"Invalid padding format: \[\(1, 2, 3\)\]"):
        canonicalize_padding([(1, 2, 3)], 1)  # type: ignore[arg-type]
    assert canonicalize_padding([1, (0, 2)], 2) == [(1, 1), (0, 2)]
    assert canonicalize_padding("same", 2) == "same"
    with pytest.raises(ValueError, match="No `einsum_str` argument was provided"):
        first_from(None, None, error_msg="No `einsum_str` argument was provided")
