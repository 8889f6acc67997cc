"""Constraints and activations the user computes, on Explicit and Auto 2x4 meshes.

``with_logical_constraint`` reshards on Explicit axes wherever the target or the array's
own type uses one (an array split over ``data`` constrained to replicated is gathered,
not JAX's assert), and is a sharding constraint on Auto axes. Under FSDP an embedding
looked up without a batch axis (a position table) comes out with its features whole, so
it combines with batch-sharded activations.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import initializers as init

FSDP = (("batch", "data"), ("embed", "data"))
KINDS = (AxisType.Explicit, AxisType.Auto)


def mesh_of(kind: AxisType, other: AxisType | None = None) -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, other or kind))


def type_spec(x: jax.Array) -> P:
    return jax.typeof(x).sharding.spec


@pytest.mark.parametrize("kind", KINDS, ids=["explicit", "auto"])
def test_constraint_to_replicated_gathers_a_sharded_array(kind: AxisType) -> None:
    mesh = mesh_of(kind)
    with pm.logical_axis_rules(FSDP), jax.set_mesh(mesh):
        x = jax.device_put(jnp.arange(32.0).reshape(8, 4), jax.P("data", None))
        eager = pm.with_logical_constraint(x, (None, None))
        traced = jax.jit(lambda a: pm.with_logical_constraint(a * 2, (None, None)))(x)
        back = jax.jit(lambda a: pm.with_logical_constraint(a, ("batch", None)))(traced)
    assert eager.sharding.is_fully_replicated and traced.sharding.is_fully_replicated
    assert back.sharding.is_equivalent_to(jax.NamedSharding(mesh, P("data", None)), 2)
    np.testing.assert_array_equal(traced, 2 * np.arange(32.0).reshape(8, 4))


def test_constraint_on_a_mesh_with_both_axis_kinds() -> None:
    # data Explicit, model Auto: a reshard on data, a constraint on model.
    mesh = mesh_of(AxisType.Explicit, AxisType.Auto)
    rules = (("batch", "data"), ("mlp", "model"))
    with pm.logical_axis_rules(rules), jax.set_mesh(mesh):
        x = jax.device_put(jnp.ones((8, 8)), jax.P("data", None))
        gathered = jax.jit(lambda a: pm.with_logical_constraint(a, (None, "mlp")))(x)
        both = jax.jit(lambda a: pm.with_logical_constraint(a, ("batch", "mlp")))(x)
    assert type_spec(gathered) == P(None, None)  # data gathered out of the type
    assert both.sharding.spec == P("data", "model")
    assert type_spec(both) == P("data", None)  # model is Auto: not part of the type


def test_linen_constraint_to_replicated_on_an_explicit_mesh() -> None:
    import adapters.linen as nn

    with nn.logical_axis_rules(FSDP), jax.set_mesh(mesh_of(AxisType.Explicit)):
        x = jax.device_put(jnp.ones((8, 4)), jax.P("data", None))
        y = jax.jit(lambda a: nn.with_logical_constraint(a, (None, None)))(x)
    assert y.sharding.is_fully_replicated


class Tokens(pm.Module):
    tok: pm.nn.Embedding
    pos: pm.nn.Embedding

    def __init__(self, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        table = lambda *names: pm.with_logical_partitioning(init.normal(1.0), names)
        self.tok = pm.nn.Embedding(16, 8, embedding_init=table("vocab", "embed"), key=k1)
        self.pos = pm.nn.Embedding(6, 8, embedding_init=table(None, "embed"), key=k2)

    def __call__(self, ids: jax.Array, fix: str = "") -> jax.Array:
        positions = jnp.arange(ids.shape[1])
        if fix == "batch layout":  # positions broadcast to the ids' layout
            positions = pm.with_logical_constraint(
                jnp.broadcast_to(positions, ids.shape), ("batch", None)
            )
        pos = self.pos(positions)
        if fix == "replicated":
            pos = pm.with_logical_constraint(pos, (None,) * pos.ndim)
        return self.tok(ids) + (pos if pos.ndim == 3 else pos[None])


@pytest.mark.parametrize("kind", KINDS, ids=["explicit", "auto"])
def test_position_table_under_fsdp(kind: AxisType) -> None:
    ids = jax.random.randint(jax.random.key(1), (8, 6), 0, 16)
    base = Tokens(key=jax.random.key(0))
    expected = base(ids)
    mesh = mesh_of(kind)
    with pm.logical_axis_rules(FSDP), jax.set_mesh(mesh):
        model = pm.shard(base, mesh)
        sids = jax.device_put(ids, pm.logical_to_mesh_sharding(("batch", None), mesh))
        fixes = ("", "replicated", "batch layout")
        outs = pm.jit(lambda m, i: [m(i, fix) for fix in fixes] + [m.pos(jnp.arange(6))])(
            model, sids
        )
        pos = outs.pop()
    assert model.pos.embedding.value.value.sharding.spec == P(None, "data")
    for out in outs:
        np.testing.assert_allclose(out, expected, rtol=1e-6)
        if kind == AxisType.Explicit:
            assert type_spec(out) == P("data", None, None)
    if kind == AxisType.Explicit:
        assert type_spec(pos) == P(None, None)  # FSDP: the table's features gathered


class Recording(pm.sharding.ExplicitMeshPolicy):
    """The base rules, recording which ops asked (a policy a user swaps in)."""

    def __init__(self) -> None:
        self.ops: list[str] = []

    def gather_rows(self, table: Any, ids: Any, *, op: str) -> Any:
        self.ops.append(op)
        return super().gather_rows(table, ids, op=op)


def test_the_explicit_mesh_policy_is_one_object_a_user_replaces() -> None:
    assert type(pm.sharding.explicit_mesh_policy()) is pm.sharding.ExplicitMeshPolicy
    recording = Recording()
    mesh, base = mesh_of(AxisType.Explicit), Tokens(key=jax.random.key(0))
    with pm.logical_axis_rules(FSDP), jax.set_mesh(mesh):
        model = pm.shard(base, mesh)
        with pm.sharding.use_explicit_mesh_policy(recording):
            assert pm.sharding.explicit_mesh_policy() is recording
            jax.jit(lambda m: m.pos(jnp.arange(6)))(model)
    assert recording.ops == ["embed"]
    assert pm.sharding.explicit_mesh_policy() is not recording
    with pytest.raises(pm.ShardingError, match="needs an ExplicitMeshPolicy"):
        with pm.sharding.use_explicit_mesh_policy(object()):  # type: ignore[arg-type]
            pass


def test_one_resolver_marks_unassigned_names() -> None:
    rules = (("batch", "data"), ("embed", "data"))
    resolved = pm.sharding.resolve_logical_axes(("batch", "embed", "mlp", None), rules)
    assert resolved == ["data", pm.sharding.UNASSIGNED, pm.sharding.UNASSIGNED, None]
    assert not pm.sharding.UNASSIGNED and repr(pm.sharding.UNASSIGNED) == "UnassignedAxis"
    assert pm.sharding.RulesFallback is pm.RulesFallback
    assert pm.sharding.current_mesh() is None


class Stack(pm.Module):
    layers: list[pm.nn.Linear]

    def __init__(self, kernel_init: Any) -> None:
        keys = jax.random.split(jax.random.key(0), 2)
        self.layers = [pm.nn.Linear(4, 4, kernel_init=kernel_init, key=k) for k in keys]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.layers[1](self.layers[0](x))


def test_sharding_and_shape_errors_name_a_layer_alike() -> None:
    other = jax.make_mesh((4, 2), ("data", "model"))
    names = pm.with_logical_partitioning(init.lecun_normal(), (None, "out"))
    with pm.logical_axis_rules((("out", "model"),)):
        stack = pm.shard(Stack(names), other)
    x = jax.device_put(jnp.ones((8, 4)), jax.NamedSharding(mesh_of(AxisType.Explicit), P("data")))
    with pytest.raises(pm.ShardingError, match=r"^Stack\.layers\[0\]: pytreemod\.nn\.functional"):
        stack(x)
    with pytest.raises(pm.ShapeError, match=r"^Stack\.layers\[0\]\(x=f32\[8, ?3\]"):
        Stack(init.lecun_normal())(jnp.ones((8, 3)))


@pytest.mark.parametrize("kind", KINDS, ids=["explicit", "auto"])
def test_apply_sharding_takes_a_spec_on_the_set_mesh(kind: AxisType) -> None:
    with jax.set_mesh(mesh_of(kind)):
        x = jax.device_put(jnp.arange(32.0).reshape(8, 4), jax.P("data", None))
        out = jax.jit(lambda a: pm.sharding.apply_sharding(a, P(None, "model")))(x)
    assert out.sharding.spec == P(None, "model")
    np.testing.assert_array_equal(out, x)


def test_apply_sharding_constrains_to_a_sharding_without_a_mesh() -> None:
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    out = jax.jit(lambda a: pm.sharding.apply_sharding(a, single))(jnp.ones(4))
    assert out.sharding == single
