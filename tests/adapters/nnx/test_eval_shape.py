"""adapters.nnx.eval_shape: abstract modules with ShapeDtypeStruct values."""

import jax
import jax.numpy as jnp
from flax import nnx as fnnx

from adapters import nnx


def test_eval_shape_of_a_module_matches_flax():
    rngs = nnx.Rngs(0)
    model = nnx.eval_shape(lambda r: nnx.Embed(10, 3, param_dtype=jnp.bfloat16, rngs=r), rngs)
    assert isinstance(model, nnx.Embed) and isinstance(model.embedding, nnx.Param)
    assert model.embedding.get_value() == jax.ShapeDtypeStruct((10, 3), jnp.bfloat16)
    theirs = fnnx.eval_shape(
        lambda r: fnnx.Embed(10, 3, param_dtype=jnp.bfloat16, rngs=r), fnnx.Rngs(0)
    )
    assert theirs.embedding.get_value().shape == model.embedding.shape
    assert int(rngs.default.count[...]) == 0  # the argument's counter is untouched


def test_eval_shape_of_plain_outputs_and_shared_references():
    out = nnx.eval_shape(lambda x, scale: (x * scale, {"n": x.sum()}), jnp.ones((2, 4)), scale=2)
    assert out == (
        jax.ShapeDtypeStruct((2, 4), jnp.float32),
        {"n": jax.ShapeDtypeStruct((), jnp.float32)},
    )

    def tied(rngs):
        layer = nnx.Linear(2, 2, rngs=rngs)
        return nnx.Sequential(layer, layer)

    seq = nnx.eval_shape(tied, nnx.Rngs(0))
    assert seq.layers[0] is seq.layers[1]
    assert seq.layers[0].kernel.get_value() == jax.ShapeDtypeStruct((2, 2), jnp.float32)
