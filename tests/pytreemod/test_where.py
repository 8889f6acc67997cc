"""One model-path walk (pytreemod/_where.py): a ShapeError, a ShardingError and a layer's
own LayerConfigError raised by the same layer of a model name it by the same path, in a
scanned stack of boxed (logically named) layers too (a list of layers:
test_explicit_constraints.py)."""

import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import initializers as init

RULES = (("batch", "data"), ("out", "model"))
LAYERS = {pm.PARTITION_NAME: "layers"}


def _mesh(shape: tuple[int, int]) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Explicit,) * 2)


def _linear(fan_in: int, key: jax.Array) -> pm.nn.Linear:
    kernel_init = pm.with_logical_partitioning(init.lecun_normal(), (None, "out"))
    return pm.nn.Linear(fan_in, 8, kernel_init=kernel_init, key=key)


def _path(error: BaseException) -> str:
    """The layer an error names: its message up to the call's arguments or the colon."""
    found = re.match(r"^([\w.\[\]*]+?)(?:\(|: )", str(error))
    assert found is not None, str(error)
    return found.group(1)


def _shard(tree: Any, mesh_shape: tuple[int, int]) -> Any:
    with pm.logical_axis_rules(RULES):
        return pm.shard(tree, _mesh(mesh_shape))


def _errors(wrong_shape: Any, wrong_mesh: Any) -> tuple[str, str]:
    """The paths named, under ``pm.jit``, by the ShapeError of ``wrong_shape`` (a layer
    built for 5 features, given 8) and by the ShardingError of ``wrong_mesh`` (the layer
    on a 4x2 mesh, its input on a 2x4 one)."""
    x = jnp.ones((8, 8))
    with pytest.raises(pm.ShapeError) as shape_error:
        pm.jit(wrong_shape)(x)
    x = jax.device_put(x, NamedSharding(_mesh((2, 4)), P("data")))
    with pytest.raises(pm.ShardingError, match="on mesh") as sharding_error:
        pm.jit(wrong_mesh)(x)
    return _path(shape_error.value), _path(sharding_error.value)


class Deep(pm.Module):
    blocks: pm.nn.Linear  # two layers stacked on a leading axis named "layers"

    def __call__(self, x: jax.Array) -> jax.Array:
        @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry, metadata_params=LAYERS)
        def body(h: jax.Array, layer: pm.nn.Linear) -> jax.Array:
            return layer(h)

        return body(x, self.blocks)


def test_shape_and_sharding_errors_name_a_layer_of_a_scanned_stack_alike() -> None:
    def build(fan_in: int) -> Deep:
        make = pm.vmap(lambda k: _linear(fan_in, k), metadata_params=LAYERS)
        return Deep(make(jax.random.split(jax.random.key(0), 2)))

    # The stack's boxes name an extra axis ("layers"): the layer is still found in it.
    paths = _errors(build(5), _shard(build(8), (4, 2)))
    assert paths == ("Deep.blocks[*]", "Deep.blocks[*]")


def test_a_layers_own_error_names_it_as_shape_errors_do() -> None:
    class Lookup(pm.Module):
        parts: dict[str, pm.nn.Embedding]

        def __call__(self, ids: jax.Array) -> jax.Array:
            return self.parts["words"](ids)

    model = Lookup({"words": pm.nn.Embedding(4, 2, key=jax.random.key(0))})
    with pytest.raises(pm.LayerConfigError, match=r"^Lookup\.parts\.words: ids must be in"):
        model(jnp.array([1, 7]))
    with pytest.raises(pm.ShapeError, match=r"^Lookup\.parts\.words\(ids=f32"):
        model(jnp.ones((2,)))


def test_an_ops_error_inside_a_layer_names_the_layer() -> None:
    class Net(pm.Module):
        norm: pm.nn.BatchNorm

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.norm(x)

    with pytest.raises(pm.LayerConfigError, match=r"^Net\.norm: axis 3 is out of range for an"):
        pm.apply(Net(pm.nn.BatchNorm(4, axis=3)), jnp.ones((2, 4)), mutable="batch_stats")
