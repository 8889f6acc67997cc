"""``F.softmax_cross_entropy_with_integer_labels`` on a 2x4 mesh: logits sharded along the
classes (a vocabulary-sharded LM's, ``P('data', None, 'model')``) give optax's loss and
gradient on Explicit and Auto axes, the gradient keeps the logits' sharding, and the
compiled step gathers no logits (optax's own loss raises JAX's ShardingTypeError there)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from pytreemod.nn import functional as F

LOGITS = 3 * jax.random.normal(jax.random.key(0), (8, 6, 32))
LABELS = jax.random.randint(jax.random.key(1), (8, 6), 0, 32)
WHERE = jax.random.bernoulli(jax.random.key(2), 0.8, (8, 6))


def _loss(logits: jax.Array, labels: jax.Array, where: jax.Array | None) -> jax.Array:
    return F.softmax_cross_entropy_with_integer_labels(logits, labels, where=where).mean()


def _reference(where: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    def loss(x: jax.Array) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(x, LABELS, where=where).mean()

    return jax.value_and_grad(loss)(LOGITS)


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto])
@pytest.mark.parametrize("labels_spec", [P("data", None), P()])
@pytest.mark.parametrize("masked", [False, True])
def test_vocabulary_sharded_logits(kind: AxisType, labels_spec: P, masked: bool) -> None:
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))
    with jax.set_mesh(mesh):
        logits = jax.device_put(LOGITS, NamedSharding(mesh, P("data", None, "model")))
        labels = jax.device_put(LABELS, NamedSharding(mesh, labels_spec))
        where = jax.device_put(WHERE, NamedSharding(mesh, P("data"))) if masked else None
        step = jax.jit(jax.value_and_grad(_loss))
        loss, grad = step(logits, labels, where)
        hlo = step.lower(logits, labels, where).compile().as_text()
        per_row = jax.jit(F.softmax_cross_entropy_with_integer_labels)(logits, labels)
    ref_loss, ref_grad = _reference(WHERE if masked else None)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert hlo is not None and "all-gather" not in hlo
    assert grad.sharding.is_equivalent_to(logits.sharding, 3)
    if kind == AxisType.Explicit:
        assert jax.typeof(per_row).sharding.spec == P("data", None)


def test_optax_cannot_shard_it_on_an_explicit_mesh() -> None:
    """Why the op exists: optax's gather has no sharding rule for these logits."""
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    with jax.set_mesh(mesh):
        logits = jax.device_put(LOGITS, NamedSharding(mesh, P("data", None, "model")))
        labels = jax.device_put(LABELS, NamedSharding(mesh, P("data")))
        with pytest.raises(Exception, match="sharding") as info:
            jax.jit(optax.softmax_cross_entropy_with_integer_labels)(logits, labels)
    assert "ShardingTypeError" in type(info.value).__name__


def test_out_sharding_overrides_the_output() -> None:
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    with jax.set_mesh(mesh):
        logits = jax.device_put(LOGITS, NamedSharding(mesh, P("data", None, "model")))
        out = jax.jit(
            lambda x, y: F.softmax_cross_entropy_with_integer_labels(x, y, out_sharding=P())
        )(logits, LABELS)
    assert jax.typeof(out).sharding.spec == P(None, None)
    np.testing.assert_allclose(
        out, optax.softmax_cross_entropy_with_integer_labels(LOGITS, LABELS), rtol=1e-6
    )
    assert jnp.isfinite(out).all()
