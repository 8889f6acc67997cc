"""``MultiHeadAttention.init_cache`` under logical axis rules on a 2x4 mesh: the decoding
cache carries logical names taken from the kernels (``("batch", None, heads, head_dim)``)
and is created with the sharding they give, so a jitted decode step keeps every
sharding (and traces once) on Explicit and Auto meshes, with the unsharded outputs."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import initializers as init

RULES = (("batch", "data"), ("heads", "model"), ("embed", "data"))
STEPS, MAX_LEN = 4, 8


def _kinit(*names: str | None) -> Any:
    return pm.with_logical_partitioning(init.lecun_normal(), names)


def _attention(key: jax.Array | None = None) -> pm.nn.MultiHeadAttention:
    return pm.nn.MultiHeadAttention(
        4,
        16,
        kernel_init=_kinit("embed", "heads", "kv"),
        out_kernel_init=_kinit("heads", "kv", "embed"),
        use_bias=False,
        key=jax.random.key(0) if key is None else key,
    )


def _mesh(kind: AxisType) -> Any:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))


def _decode(layer: Any, x: jax.Array, step: Any) -> tuple[jax.Array, Any]:
    outs = []
    for t in range(STEPS):
        y, layer = step(layer, x[:, t : t + 1])
        outs.append(y)
    return jnp.concatenate(outs, axis=1), layer


def _shardings(tree: Any) -> list[Any]:
    return [a.sharding for a in jax.tree.leaves(tree)]


def _spec(x: jax.Array) -> P:
    sharding = x.sharding
    assert isinstance(sharding, NamedSharding)
    entries = tuple(sharding.spec)
    while entries and entries[-1] is None:
        entries = entries[:-1]
    return P(*entries)


def test_the_cache_is_named_after_the_kernels_and_unplaced_without_rules() -> None:
    layer = _attention().init_cache(2, max_len=MAX_LEN)
    assert layer.cached_key is not None and layer.cached_value is not None
    box = layer.cached_key.value
    assert isinstance(box, pm.LogicallyPartitioned)
    assert box.names == ("batch", None, "heads", "kv")
    assert pm.get_partition_spec(layer.cached_value.value) == P(None, None, None, None)
    assert getattr(layer.cached_value.value, "names", None) == ("batch", None, "heads", "kv")
    with pm.logical_axis_rules(RULES):
        assert pm.get_partition_spec(layer).cached_key.value == P("data", None, "model", None)


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=str)
def test_init_cache_is_sharded_and_a_decode_step_keeps_it(kind: AxisType) -> None:
    x = jax.random.normal(jax.random.key(1), (2, STEPS, 16))
    ref, ref_layer = _decode(  # the unsharded reference: eager decode steps
        _attention().init_cache(2, max_len=MAX_LEN),
        x,
        lambda m, v: pm.apply(m.decode, v, mutable="cache"),
    )
    traces = []

    @pm.jit
    def step(layer: Any, v: jax.Array) -> Any:
        traces.append(1)
        return pm.apply(layer.decode, v, mutable="cache")

    mesh = _mesh(kind)
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        layer = pm.shard(_attention(), mesh).init_cache(2, max_len=MAX_LEN)
        born = _shardings(layer)
        sx = jax.device_put(x, pm.logical_to_mesh_sharding(("batch",), mesh))
        out, layer = _decode(layer, sx, step)
    assert layer.cached_key is not None and ref_layer.cached_key is not None
    key = layer.cached_key.value.value
    assert _spec(key) == P("data", None, "model")
    assert all(a.is_equivalent_to(b, 4) for a, b in zip(_shardings(layer), born, strict=True)), (
        "the decode step changed a sharding"
    )
    assert len(traces) == 1  # one type for the cache: the step never retraces
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(key, ref_layer.cached_key.value.value, rtol=1e-5, atol=1e-6)


def test_a_batch_the_mesh_cannot_split_is_replicated() -> None:
    mesh = _mesh(AxisType.Explicit)
    x = jax.random.normal(jax.random.key(1), (1, STEPS, 16))
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        layer = pm.shard(_attention(), mesh).init_cache(1, max_len=MAX_LEN)
        assert layer.cached_key is not None
        assert layer.cached_key.value.names == (None, None, "heads", "kv")
        assert _spec(layer.cached_key.value.value) == P(None, None, "model")
        step = pm.jit(lambda m, v: pm.apply(m.decode, v, mutable="cache"))
        out, _ = _decode(layer, x, step)
    assert out.shape == (1, STEPS, 16) and bool(jnp.isfinite(out).all())


def test_init_cache_inside_jit_is_sharded() -> None:
    mesh = _mesh(AxisType.Explicit)
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        layer = pm.shard(_attention(), mesh)
        cached = jax.jit(lambda m: m.init_cache(2, max_len=MAX_LEN))(layer)
    assert cached.cached_value is not None
    assert _spec(cached.cached_value.value.value) == P("data", None, "model")


def test_kernels_without_names_give_a_plain_cache() -> None:
    layer = pm.nn.MultiHeadAttention(4, 16, key=jax.random.key(0)).init_cache(2, MAX_LEN)
    assert layer.cached_key is not None
    assert isinstance(layer.cached_key.value, jax.Array)


def test_a_stack_of_layers_gets_a_stacked_sharded_cache() -> None:
    """``init_cache`` under ``pm.vmap`` (one cache per layer) and a scanned decode step."""
    layers = {pm.PARTITION_NAME: "layers"}
    keys = jax.random.split(jax.random.key(0), 3)
    stack = pm.vmap(_attention, metadata_params=layers)(keys)

    @pm.scan(in_axes=(pm.Carry, 0), out_axes=(pm.Carry, 0), metadata_params=layers)
    def decode(x: jax.Array, layer: Any) -> Any:
        return pm.apply(layer.decode, x, mutable="cache")

    mesh = _mesh(AxisType.Explicit)
    with pm.logical_axis_rules((("layers", None), *RULES)), jax.set_mesh(mesh):
        cached = pm.vmap(lambda m: m.init_cache(2, MAX_LEN), metadata_params=layers)(
            pm.shard(stack, mesh)
        )
        assert cached.cached_key is not None
        born = cached.cached_key.value.value.sharding
        x = jax.device_put(jnp.ones((2, 1, 16)), P("data"))
        _, stepped = jax.jit(decode)(x, cached)
    assert cached.cached_key.value.names == ("layers", "batch", None, "heads", "kv")
    assert _spec(cached.cached_key.value.value) == P(None, "data", None, "model")
    assert stepped.cached_key is not None
    assert stepped.cached_key.value.value.sharding.is_equivalent_to(born, 5)
