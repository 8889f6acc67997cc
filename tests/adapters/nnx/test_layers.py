"""adapters.nnx Dropout, Sequential and initializers against flax.nnx: same masks, parameters
and outputs from the same seeds (the linear family: test_linear.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx


def _assert_same_state(ours, theirs):
    ours_flat = nnx.to_flat_state(nnx.state(ours))
    theirs_flat = list(fnnx.to_flat_state(fnnx.state(theirs, fnnx.Param)))
    assert [p for p, _ in ours_flat] == [p for p, _ in theirs_flat]
    for (_, a), (_, b) in zip(ours_flat, theirs_flat, strict=True):
        np.testing.assert_allclose(a[...], b[...], rtol=1e-6, atol=1e-6)


def test_sequential_matches_flax_with_shared_rngs_and_activation():
    rngs, frngs = nnx.Rngs(0), fnnx.Rngs(0)
    ours = nnx.Sequential(nnx.Linear(2, 4, rngs=rngs), jax.nn.relu, nnx.Linear(4, 1, rngs=rngs))
    theirs = fnnx.Sequential(
        fnnx.Linear(2, 4, rngs=frngs), jax.nn.relu, fnnx.Linear(4, 1, rngs=frngs)
    )
    _assert_same_state(ours, theirs)
    x = jnp.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-5)


def test_sequential_passes_tuples_and_dicts_and_checks_callables():
    seq = nnx.Sequential(lambda x: (x, x + 1), lambda a, b: {"a": a, "b": b}, lambda a, b: a * b)
    assert seq(2) == 6
    assert nnx.Sequential()(5) == 5
    with pytest.raises(TypeError, match="Sequence\\[1\\] is not callable: 3"):
        nnx.Sequential(abs, 3)(1)  # type: ignore[arg-type]


def test_dropout_matches_flax_masks():
    x = jnp.ones((4, 6))
    ours = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=3))
    theirs = fnnx.Dropout(0.5, rngs=fnnx.Rngs(dropout=3))
    np.testing.assert_array_equal(ours(x), theirs(x))
    np.testing.assert_array_equal(ours(x), theirs(x))  # the forked stream advances alike
    key = jax.random.key(1)
    np.testing.assert_array_equal(nnx.Dropout(0.3)(x, rngs=key), fnnx.Dropout(0.3)(x, rngs=key))
    np.testing.assert_array_equal(
        nnx.Dropout(0.3, broadcast_dims=(0,))(x, rngs=nnx.Rngs(dropout=1)),
        fnnx.Dropout(0.3, broadcast_dims=(0,))(x, rngs=fnnx.Rngs(dropout=1)),
    )
    stream = nnx.Rngs(dropout=1).dropout
    assert nnx.Dropout(0.5, rngs=stream).rngs is not stream


def test_dropout_deterministic_and_edge_rates():
    x = jnp.ones(5)
    assert nnx.Dropout(0.5, deterministic=True)(x) is x
    assert nnx.Dropout(0.5)(x, deterministic=True) is x
    assert nnx.Dropout(0.0)(x) is x
    np.testing.assert_array_equal(nnx.Dropout(1.0)(x), jnp.zeros(5))


def test_dropout_errors():
    with pytest.raises(ValueError, match="`deterministic` is False, but no `rngs` argument"):
        nnx.Dropout(0.5)(jnp.ones(3))
    with pytest.raises(TypeError, match="rngs must be a Rngs, RngStream or None, but got"):
        nnx.Dropout(0.5, rngs=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"rngs must be a Rngs, RngStream or jax\.Array, but got"):
        nnx.Dropout(0.5)(jnp.ones(3), rngs=3)  # type: ignore[arg-type]


def test_initializers_namespace_matches_flax():
    key = jax.random.key(0)
    for name in ("lecun_normal", "zeros_init", "ones_init", "xavier_uniform"):
        ours = getattr(nnx.initializers, name)()
        theirs = getattr(fnnx.initializers, name)()
        np.testing.assert_array_equal(ours(key, (3, 2)), theirs(key, (3, 2)))
    layer = nnx.Linear(2, 2, kernel_init=nnx.initializers.normal(0.5), rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(
        layer.kernel[...],
        fnnx.Linear(2, 2, kernel_init=fnnx.initializers.normal(0.5), rngs=fnnx.Rngs(0)).kernel[...],
    )
