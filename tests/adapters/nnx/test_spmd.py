"""adapters.nnx sharding: out_sharding metadata, partition specs through logical axis rules,
eager sharding on Auto and Explicit meshes, abstract models, and the axis bookkeeping of
transforms (add_axis/remove_axis)."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from adapters import nnx
from adapters.core import spmd as core_spmd


def _mesh(kind: AxisType = AxisType.Auto) -> jax.sharding.Mesh:
    return jax.make_mesh((2, 2), ("row", "col"), axis_types=(kind, kind))


def _spec(x: jax.Array) -> P:
    sharding = x.sharding
    assert isinstance(sharding, NamedSharding)
    return sharding.spec


def _param(shape: tuple[int, ...] = (4, 4), **metadata) -> nnx.Param:
    return nnx.Param(jnp.ones(shape), eager_sharding=False, **metadata)


def test_partition_spec_through_local_and_context_rules():
    v = _param(out_sharding=("row-alias", "col-alias"), sharding_rules=(("row-alias", "row"),))
    with nnx.logical_axis_rules((("col-alias", "col"),)):
        assert nnx.spmd.get_var_pspec(v) == P("row", "col")
    assert nnx.spmd.get_var_pspec(_param(out_sharding=("row", None))) == P("row", None)
    assert nnx.spmd.get_var_pspec(_param()) == P()
    tree = {"w": _param(out_sharding=("row", "col")), "x": jnp.ones(2), "s": "static"}
    specs = nnx.get_partition_spec(tree)
    assert specs["w"].get_value() == P("row", "col") and specs["x"] == P() and specs["s"] is None
    named = nnx.get_named_sharding({"w": tree["w"]}, _mesh())
    assert named["w"].get_value().spec == P("row", "col")


def test_inconsistent_rules_raise():
    v = _param(out_sharding=("a",), sharding_rules=(("a", "row"),))
    with nnx.logical_axis_rules((("a", "col"),)):
        with pytest.raises(ValueError, match="Inconsistent logical axis annotations for a"):
            nnx.spmd.get_var_pspec(v)


@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit])
def test_eager_sharding_places_variables(kind):
    mesh = _mesh(kind)
    with jax.set_mesh(mesh):
        w = nnx.Param(jnp.ones((4, 4)), out_sharding=(None, "col"))
        made = nnx.with_partitioning(lambda: jnp.ones((4, 2)), ("row", "col"))()
        m = nnx.Param(made)
    assert _spec(w.get_value()) == P(None, "col")
    assert m.get_value().sharding.is_equivalent_to(NamedSharding(mesh, P("row", "col")), 2)
    assert m.get_metadata("out_sharding") == ("row", "col")
    v = nnx.Variable(jnp.ones((4, 4)), out_sharding=("row", "col"), mesh=mesh)
    assert _spec(v.get_value()) == P("row", "col")


def test_eager_sharding_can_be_turned_off_and_needs_a_mesh():
    with nnx.use_eager_sharding(False), jax.set_mesh(_mesh()):
        w = nnx.Param(jnp.ones((4, 4)), out_sharding=(None, "col"))
    sharding = w.get_value().sharding
    assert not isinstance(sharding, NamedSharding) or sharding.spec == P()
    with pytest.raises(ValueError, match="An auto mesh context or metadata is required"):
        nnx.Param(jnp.ones((4, 4)), out_sharding=("row", None))


def test_mixed_mesh_axis_types_raise():
    mesh = jax.make_mesh((2, 2), ("row", "col"), axis_types=(AxisType.Auto, AxisType.Explicit))
    with pytest.raises(ValueError, match="Mesh must have all axes as Explicit or all axes as Auto"):
        core_spmd.shard_value(jnp.ones((4, 4)), ("row", "col"), None, mesh)


def test_add_and_remove_axis_update_sharding_metadata():
    v = _param(out_sharding=("din", "dout"), nickname=("in", "out"))
    meta = {nnx.PARTITION_NAME: "layers", "nickname": "nick"}
    nnx.spmd.add_axis(v, 0, meta)
    assert v.get_metadata("out_sharding") == ("layers", "din", "dout")
    assert v.get_metadata("nickname") == ("nick", "in", "out")
    nnx.spmd.remove_axis(v, 0, meta)
    assert v.get_metadata("out_sharding") == ("din", "dout")
    short = _param(out_sharding=("a",))
    nnx.spmd.add_axis(short, 3, {nnx.PARTITION_NAME: "z"})
    assert short.get_metadata("out_sharding") == ("a", None, None, "z")
    with pytest.raises(ValueError, match="Expected to remove 'x' at index 0"):
        nnx.spmd.remove_axis(short, 0, {nnx.PARTITION_NAME: "x"})
    with pytest.raises(ValueError, match='"partition_name" is not specified'):
        nnx.spmd.add_axis(short, 0, {})


def test_abstract_models_carry_shardings():
    mesh = _mesh()

    def build():
        return nnx.Linear(4, 8, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": ("row", "col")})

    _, abstract = nnx.get_abstract_model(build, mesh)
    kernel = abstract["kernel"].get_value()
    assert isinstance(kernel, jax.ShapeDtypeStruct) and kernel.shape == (4, 8)
    assert kernel.sharding.spec == P("row", "col")
    assert abstract["bias"].get_value().sharding.spec == P()
    with jax.set_mesh(mesh):
        model = nnx.as_abstract(nnx.eval_shape(build))
    assert model.kernel.get_value().sharding.spec == P("row", "col")
    plain = nnx.as_abstract(nnx.eval_shape(lambda: nnx.Linear(2, 2, rngs=nnx.Rngs(0))))
    assert getattr(plain.kernel.get_value(), "sharding", None) is None
    metadata = {"out_sharding": ("col", None), "mesh": mesh}
    own = nnx.eval_shape(lambda: nnx.Linear(4, 2, rngs=nnx.Rngs(0), kernel_metadata=metadata))
    own = nnx.as_abstract(own)
    assert own.kernel.get_value().sharding.spec == P("col", None)
    with pytest.warns(DeprecationWarning, match="Use as_abstract instead"):
        nnx.abstract_with_sharding(plain)


@pytest.mark.parametrize(
    ("table", "ids"), [(P("row"), P("col")), (P(), P("row")), (P(None, "col"), P("row"))]
)
def test_embed_leaves_a_sharded_lookup_to_jax_as_flax_does(table: P, ids: P) -> None:
    # Without out_sharding the lookup is JAX's take: a sharded table or sharded ids make
    # its output sharding ambiguous on an Explicit mesh, and JAX refuses, as under Flax.
    with jax.set_mesh(_mesh(AxisType.Explicit)):
        emb = jax.sharding.reshard(nnx.Embed(8, 4, rngs=nnx.Rngs(0)), table)
        tokens = jax.sharding.reshard(jnp.arange(4), ids)
        with pytest.raises(Exception, match="sharding") as info:
            emb(tokens)
        assert type(info.value).__name__ == "ShardingTypeError"  # JAX's (not public)
        out = emb(tokens, out_sharding=P("row"))
        assert _spec(out) == P("row", None)
    table_rows = jax.device_get(emb.embedding[...])[:4]
    assert jnp.allclose(jax.device_get(out), table_rows)
