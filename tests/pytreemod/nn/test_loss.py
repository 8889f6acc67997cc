"""``F.softmax_cross_entropy_with_integer_labels`` against optax on one device: values and
gradients over shapes, class axes, ``where`` masks and out-of-range labels; its errors.
(The sharded runs are in tests/pytreemod/test_explicit_loss.py.)"""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings

import pytreemod as pm
from pytreemod.nn import functional as F

ours = F.softmax_cross_entropy_with_integer_labels
theirs = optax.softmax_cross_entropy_with_integer_labels


def _close(a: jax.Array, b: jax.Array) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def _values_and_grads(f, logits, labels, weights, where, axis):
    def loss(x):
        return jnp.sum(f(x, labels, axis=axis, where=where) * weights)

    return f(logits, labels, axis=axis, where=where), jax.grad(loss)(logits)


@jax.jit(static_argnames="axis")
def _both(logits, labels, weights, where, axis):  # one compilation per example
    return [_values_and_grads(f, logits, labels, weights, where, axis) for f in (ours, theirs)]


@settings(max_examples=10, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    classes=st.integers(1, 9),
    axis=st.integers(-1, 3),
    seed=st.integers(0, 2**16),
    masked=st.sampled_from([None, "rows", "classes"]),
)
def test_values_and_gradients_equal_optax(
    shape: list[int], classes: int, axis: int, seed: int, masked: str | None
) -> None:
    ndim = len(shape) + 1
    axis = min(axis, ndim - 1)
    full = list(shape)
    full.insert(axis % ndim, classes)
    # NumPy draws: an eager jax.random call compiles anew for every new shape.
    rng = np.random.default_rng(seed)
    logits = (3 * rng.standard_normal(full)).astype(np.float32)
    labels = rng.integers(0, classes, shape).astype(np.int32)
    where = {
        None: None,
        "rows": rng.random(shape) < 0.7,
        "classes": rng.random(full) < 0.7,
    }[masked]
    weights = rng.standard_normal(shape).astype(np.float32)
    (value, grad), (ref_value, ref_grad) = _both(logits, labels, weights, where, axis)
    _close(value, ref_value)
    _close(grad, ref_grad)


def test_several_class_axes_index_in_row_major_order() -> None:
    logits = jax.random.normal(jax.random.key(0), (2, 3, 5, 4))
    labels = jax.random.randint(jax.random.key(1), (2, 5), 0, 12)
    (value, grad), (ref_value, ref_grad) = _both(logits, labels, 1.0, None, (1, 3))
    _close(value, ref_value)
    _close(grad, ref_grad)


def test_labels_out_of_range_as_optax() -> None:
    logits = jnp.arange(12.0).reshape(3, 4)
    labels = jnp.array([-1, 4, -5])  # counts from the end; past the end; past the start
    a, b = ours(logits, labels), theirs(logits, labels)
    assert np.array_equal(np.isnan(a), [False, True, True])
    _close(a[0], b[0])
    assert np.isnan(b[1:]).all()
    grad = [jax.grad(lambda x, f=f: jnp.nansum(f(x, labels)))(logits) for f in (ours, theirs)]
    _close(*grad)


def test_keeps_a_low_precision_dtype() -> None:
    logits = jax.random.normal(jax.random.key(0), (4, 7), jnp.bfloat16)
    labels = jnp.array([0, 6, 3, 2])
    out = ours(logits, labels)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(out, np.float32), np.asarray(theirs(logits, labels), np.float32), rtol=1e-2
    )


def test_labels_of_the_wrong_shape_are_a_shape_error() -> None:
    with pytest.raises(pm.ShapeError, match=r"labels i32\[4, 3\] must have logits' shape"):
        ours(jnp.zeros((4, 7)), jnp.zeros((4, 3), jnp.int32))


def test_a_where_mask_of_another_shape_is_a_shape_error() -> None:
    logits, labels = jnp.zeros((4, 7)), jnp.zeros(4, jnp.int32)
    with pytest.raises(pm.ShapeError, match=r"where bool\[4, 6\] must have logits' shape"):
        ours(logits, labels, where=jnp.ones((4, 6), bool))


def test_float_labels_are_a_shape_error() -> None:
    with pytest.raises(pm.ShapeError, match="labels"):
        ours(jnp.zeros((4, 7)), jnp.zeros((4,)))


def test_an_axis_named_twice_is_a_config_error() -> None:
    with pytest.raises(pm.LayerConfigError, match="names an axis twice"):
        ours(jnp.zeros((4, 7)), jnp.zeros((), jnp.int32), axis=(1, -1))
