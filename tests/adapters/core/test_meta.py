"""``adapters.core.meta``: pytreemod's boxes, the tree-level helpers, and the law
``remove_axis(add_axis(x)) == x`` through the lifted transforms."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from adapters.core import Scope, apply, init, lift, meta


def test_meta_reexports_pytreemod_boxes() -> None:
    assert meta.Partitioned is pm.Partitioned and meta.AxisMetadata is pm.AxisMetadata
    assert meta.with_partitioning is pm.with_partitioning
    # One implementation of the box axes: the tree helpers are pytreemod's.
    assert meta.add_axis is pm.add_axis and meta.remove_axis is pm.remove_axis
    assert meta.map_axis_meta is pm.map_boxes
    # meta.unbox is Flax's (constrains Partitioned values under a mesh); without a mesh it
    # strips boxes as pytreemod's does.
    tree = {"w": pm.Partitioned(jnp.ones((2, 3)), ("a", "b")), "b": jnp.ones(3)}
    assert jax.tree.map(jnp.shape, meta.unbox(tree)) == jax.tree.map(jnp.shape, pm.unbox(tree))
    assert meta.PARTITION_NAME == pm.PARTITION_NAME


def test_partition_specs_keep_logical_names_as_flax() -> None:
    tree = {
        "logical": pm.LogicallyPartitioned(jnp.ones((2, 3)), ("embed", "mlp")),
        "mesh": pm.Partitioned(jnp.ones(2), ("model",)),
        "plain": jnp.ones(3),
        "other": "not an array",
    }
    with pm.logical_axis_rules([("mlp", "model")]):
        specs = meta.get_partition_spec(tree)
    assert specs == {
        "logical": P("embed", "mlp"),  # pytreemod's own function would resolve the rules
        "mesh": P("model"),
        "plain": P(),
        "other": None,
    }
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("model",))
    shardings = meta.get_sharding({"mesh": tree["mesh"], "plain": tree["plain"]}, mesh)
    assert shardings["mesh"] == jax.sharding.NamedSharding(mesh, P("model"))
    assert shardings["plain"] == jax.sharding.NamedSharding(mesh, P())


def test_tree_helpers() -> None:
    tree = {"w": pm.Partitioned(jnp.ones((2, 3)), ("a", "b")), "b": jnp.ones(3)}
    params = {pm.PARTITION_NAME: "layers"}
    added = meta.add_axis(tree, 0, params)
    assert added["w"].names == ("layers", "a", "b")
    assert meta.remove_axis(added, 0, params)["w"].names == ("a", "b")
    replaced = meta.replace_boxed(tree, {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)})
    assert replaced["w"].names == ("a", "b") and float(replaced["w"].value.sum()) == 0.0
    assert meta.is_axis_metadata(tree["w"]) and not meta.is_axis_metadata(tree["b"])
    assert meta.map_axis_meta(lambda b: getattr(b, "names", None), tree)["w"] == ("a", "b")
    spec = meta.get_partition_spec(tree)
    assert spec["w"] == jax.sharding.PartitionSpec("a", "b")


@given(st.integers(min_value=-3, max_value=2), st.sampled_from(["layers", "heads", None]))
def test_add_remove_axis_law(index: int, name: str | None) -> None:
    box = pm.Partitioned(np.ones((2, 3)), ("x", "y"))
    params = {pm.PARTITION_NAME: name}
    assert meta.remove_axis(meta.add_axis(box, index, params), index, params) == box


def test_partitioned_params_through_vmap_and_scan_round_trip() -> None:
    init_fn = pm.with_partitioning(jax.nn.initializers.normal(), ("embed", "mlp"))

    def layer(scope: Scope, x: jax.Array) -> jax.Array:
        return x @ scope.param("kernel", init_fn, (x.shape[-1], x.shape[-1]))

    def body(scope: Scope, c: jax.Array, _: None) -> tuple[jax.Array, None]:
        return layer(scope, c), None

    stack = lift.scan(
        body,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        length=3,
        metadata_params={pm.PARTITION_NAME: "layers"},
    )
    ensemble = lift.vmap(
        lambda s, x: stack(s, x, None)[0],
        variable_axes={"params": 1},
        split_rngs={"params": True},
        metadata_params={pm.PARTITION_NAME: "ensemble"},
    )
    xs = jnp.ones((2, 4))
    y, v = init(ensemble)(jax.random.key(0), xs)
    box = v["params"]["kernel"]
    assert box.names == ("layers", "ensemble", "embed", "mlp")
    assert box.value.shape == (3, 2, 4, 4)
    np.testing.assert_allclose(apply(ensemble)(v, xs), y, rtol=1e-6)


def test_lifted_vmap_moves_each_box_axis_once() -> None:
    # The lifted vmap hands the boxes to pm.vmap, which removes the mapped axis once on the
    # way in and adds it once on the way out (no second copy in the adapter).
    calls: list[str] = []

    class Counted(pm.AxisMetadata):
        def unbox(self) -> jax.Array:
            return self.value

        def add_axis(self, index: int, params: object) -> "Counted":
            calls.append(f"add {index}")
            return self

        def remove_axis(self, index: int, params: object) -> "Counted":
            calls.append(f"remove {index}")
            return self

    def body(scope: Scope, x: jax.Array) -> jax.Array:
        v = scope.variable("aux", "v", lambda: Counted(jnp.ones(3)), unbox=False)
        return x * v.value.value

    f = lift.vmap(body, variable_axes={"aux": 0}, split_rngs={})
    _, v = init(f)(jax.random.key(0), jnp.ones((2, 3)))
    assert calls == ["add 0"] and v["aux"]["v"].value.shape == (2, 3)
    calls.clear()
    y, _ = apply(f, mutable=["aux"])(v, jnp.ones((2, 3)))
    assert calls == ["remove 0", "add 0"]
    assert y.shape == (2, 3)
