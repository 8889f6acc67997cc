"""Embedding and attend vs jnp and Flax Embed."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm

from ._compare import close, linen, randn, run_linen

Key = Callable[[], jax.Array]


def test_lookup_and_attend_match_reference_and_flax(getkey: Key) -> None:
    nn = linen()
    emb = pm.nn.Embedding(10, 6, key=getkey())
    ids = jnp.array([[0, 3, 9], [1, 1, 2]])
    table = emb.embedding.value
    close(emb(ids), table[ids], tol=0)
    close(emb(ids), run_linen(nn.Embed(10, 6), pm.to_variables(emb), ids), tol=0)
    query = randn(getkey(), (2, 3, 6))
    close(emb.attend(query), jnp.einsum("bsd,vd->bsv", query, table))
    ref = run_linen(nn.Embed(10, 6), pm.to_variables(emb), query, method="attend")
    close(emb.attend(query), ref)


def test_default_init_is_flax_embed_default(getkey: Key) -> None:
    nn = linen()
    key = getkey()
    emb = pm.nn.Embedding(50, 8, key=key)
    flax_init = nn.Embed.__dataclass_fields__["embedding_init"].default
    close(emb.embedding.value, flax_init(key, (50, 8), jnp.float32), tol=0)
    assert abs(float(emb.embedding.value.std()) - 8**-0.5) < 0.05


def test_tied_output_projection_gradients_flow_into_the_table(getkey: Key) -> None:
    emb = pm.nn.Embedding(10, 6, key=getkey())
    ids = jnp.array([[1, 2, 3]])

    def loss(e: pm.nn.Embedding) -> jax.Array:
        logits = e.attend(e(ids))
        return -jax.nn.log_softmax(logits)[0, 0, 1]

    grad = jax.grad(loss)(emb)
    assert grad.embedding.value.shape == (10, 6)
    assert bool(jnp.any(grad.embedding.value[0] != 0))  # from attend: every row gets some


def test_float_ids_and_wrong_features_are_shape_errors(getkey: Key) -> None:
    emb = pm.nn.Embedding(10, 6, key=getkey())
    with pytest.raises(TypeError, match=r"ids"):
        emb(jnp.array([1.0, 2.0]))
    with pytest.raises(
        pm.ShapeError,
        match=r"Embedding.attend\(query=f32\[2, 5\]\): dimension 'features' does not agree",
    ):
        emb.attend(jnp.ones((2, 5)))
