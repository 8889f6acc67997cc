"""Axis metadata: Partitioned, with_partitioning, unbox, boxes as PyTree nodes."""

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest

import pytreemod as pm
from tests.helpers import tree_allclose

LAYERS = {pm.PARTITION_NAME: "layers"}


def _f32(*shape: int) -> jax.Array:
    return jnp.ones(shape, dtype=jnp.float32)


def test_partitioned_fields() -> None:
    p = pm.Partitioned(_f32(4, 8), ["embed", "mlp"])  # pyright: ignore[reportArgumentType]
    assert p.names == ("embed", "mlp")  # converted to a tuple
    assert p.mesh is None
    assert p.unbox() is p.value
    assert pm.is_box(p)
    assert not pm.is_box(p.value)
    assert not pm.is_box(pm.Param(p))
    assert isinstance(p, pm.AxisMetadata)
    assert pm.Partitioned(jnp.float32(1.0), ()).names == ()


@pytest.mark.parametrize(("shape", "names"), [((4, 8), ("a",)), ((4,), ("a", "b")), ((), ("a",))])
def test_partitioned_rank_mismatch_is_an_error_only_when_sharded(
    shape: tuple[int, ...], names: tuple[str, ...]
) -> None:
    # Flax builds such boxes (a transform may add only a metadata axis); sharding them fails.
    p = pm.Partitioned(jnp.zeros(shape, dtype=jnp.float32), names)
    assert p.names == names
    with pytest.raises(
        pm.ShardingError,
        match=rf"has names .* \({len(names)} axes\) but its value has {len(shape)} axes",
    ):
        pm.get_partition_spec(p)


def test_partitioned_check_is_skipped_when_jax_rebuilds() -> None:
    p = pm.Partitioned(_f32(4, 8), ("a", "b"))
    placeholder = jax.tree.map(lambda _: None, p)
    assert placeholder.value is None
    assert placeholder.names == ("a", "b")
    # eval_shape and vmap rebuild boxes whose value does not match the names.
    shapes = jax.eval_shape(lambda: p)
    assert shapes.names == ("a", "b")
    rows = jax.vmap(lambda q: q.value.sum())(p)
    assert rows.shape == (4,)


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, ("layers", "embed", "mlp")),
        (1, ("embed", "layers", "mlp")),
        (2, ("embed", "mlp", "layers")),
        (-1, ("embed", "mlp", "layers")),
        (-3, ("layers", "embed", "mlp")),
    ],
)
def test_add_axis(index: int, expected: tuple[str, ...]) -> None:
    p = pm.Partitioned(_f32(4, 8), ("embed", "mlp"))
    q = p.add_axis(index, LAYERS)
    assert type(q) is pm.Partitioned
    assert q.names == expected
    assert q.value is p.value
    assert q.remove_axis(index, LAYERS) == p


def test_add_axis_without_partition_name_adds_none() -> None:
    p = pm.Partitioned(_f32(4), ("embed",))
    assert p.add_axis(0, {}).names == (None, "embed")
    assert p.add_axis(0, {"other": 1}).names == (None, "embed")
    assert p.add_axis(0, {}).remove_axis(0, {}) == p


def test_remove_axis() -> None:
    p = pm.Partitioned(_f32(3, 4, 8), ("layers", "embed", "mlp"))
    assert p.remove_axis(0, LAYERS).names == ("embed", "mlp")
    assert p.remove_axis(-1, {pm.PARTITION_NAME: "mlp"}).names == ("layers", "embed")


def test_remove_axis_with_wrong_name_raises() -> None:
    p = pm.Partitioned(_f32(3, 4), ("layers", "embed"))
    with pytest.raises(
        pm.AxisMetadataError,
        match=r"remove_axis\(1\) expected axis name 'layers'.*named 'embed'.*same metadata_params",
    ):
        p.remove_axis(1, LAYERS)
    with pytest.raises(pm.AxisMetadataError, match="expected axis name None"):
        p.remove_axis(0, {})


@pytest.mark.parametrize("index", [2, 5, -3])
def test_axis_index_out_of_range_raises(index: int) -> None:
    p = pm.Partitioned(_f32(3, 4), ("layers", "embed"))
    with pytest.raises(pm.AxisMetadataError, match=rf"axis {index} is out of range for 2 axes"):
        p.remove_axis(index, LAYERS)


def test_add_axis_index_out_of_range_raises() -> None:
    p = pm.Partitioned(_f32(3, 4), ("a", "b"))
    with pytest.raises(pm.AxisMetadataError, match=r"axis 3 is out of range for 3 axes"):
        p.add_axis(3, LAYERS)
    with pytest.raises(pm.AxisMetadataError, match=r"axis -4 is out of range for 3 axes"):
        p.add_axis(-4, LAYERS)


def test_get_partition_spec() -> None:
    p = pm.Partitioned(_f32(3, 4), ("data", None))
    assert p.get_partition_spec() == jax.sharding.PartitionSpec("data", None)


def test_replace_boxed() -> None:
    p = pm.Partitioned(_f32(3, 4), ("a", "b"))
    q = p.replace_boxed(jnp.zeros((3, 4), dtype=jnp.float32))
    assert q.names == ("a", "b")
    assert tree_allclose(q.value, jnp.zeros((3, 4), dtype=jnp.float32))


def test_with_partitioning() -> None:
    calls: list[tuple[Any, ...]] = []

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        calls.append((shape, dtype))
        return jax.random.normal(key, shape, dtype)

    boxed_init = pm.with_partitioning(init, (None, "mlp"), mesh="a-mesh")
    key = jax.random.key(0)
    p = boxed_init(key, (4, 8), dtype=jnp.bfloat16)
    assert isinstance(p, pm.Partitioned)
    assert p.names == (None, "mlp")
    assert p.mesh == "a-mesh"
    assert p.value.dtype == jnp.bfloat16
    assert calls == [((4, 8), jnp.bfloat16)]
    assert tree_allclose(p.value, init(key, (4, 8), jnp.bfloat16))
    assert boxed_init(key, (4,)).names == (None, "mlp")  # checked only when sharded


def test_unbox() -> None:
    p = pm.Partitioned(_f32(2, 3), ("a", "b"))
    tree = {"p": p, "param": pm.Param(p), "plain": _f32(1), "n": 3}
    out = pm.unbox(tree)
    assert out["p"] is p.value
    assert type(out["param"]) is pm.Param
    assert out["param"].value is p.value
    assert out["plain"] is tree["plain"]
    assert out["n"] == 3
    assert not any(pm.is_box(x) for x in jax.tree.leaves(out, is_leaf=pm.is_box))


def test_unbox_is_one_level() -> None:
    inner = pm.Partitioned(_f32(2), ("a",))
    outer = pm.Partitioned(inner, ("b",))
    assert pm.unbox(outer) is inner


def test_tree_map_keeps_boxes() -> None:
    tree = {"w": pm.Param(pm.Partitioned(_f32(2, 3), ("embed", "mlp"))), "b": _f32(3)}
    out = jax.tree.map(lambda x: x * 2, tree)
    assert isinstance(out["w"].value, pm.Partitioned)
    assert out["w"].value.names == ("embed", "mlp")
    assert tree_allclose(pm.unbox(out["w"].value), 2 * _f32(2, 3))
    assert len(jax.tree.leaves(tree)) == 2  # names are static


def test_optimizer_state_inherits_partitioning() -> None:
    params: Any = {"w": pm.Partitioned(_f32(2, 3), ("embed", "mlp"))}
    opt = optax.adam(1e-3)
    with jax.numpy_dtype_promotion("standard"):  # optax is not strict-promotion clean
        state: Any = opt.init(params)
        updates: Any
        updates, _ = opt.update(jax.tree.map(jnp.ones_like, params), state, params)
    mu = state[0].mu
    assert isinstance(mu["w"], pm.Partitioned)
    assert mu["w"].names == ("embed", "mlp")
    assert updates["w"].names == ("embed", "mlp")


def test_boxes_under_jit() -> None:
    traces: list[int] = []

    def f(p: pm.Partitioned) -> pm.Partitioned:
        traces.append(1)
        return p.replace_boxed(p.value + 1)

    jitted = jax.jit(f)
    out = jitted(pm.Partitioned(_f32(2), ("a",)))
    assert out.names == ("a",)
    jitted(pm.Partitioned(_f32(2) * 3, ("a",)))
    assert len(traces) == 1
    jitted(pm.Partitioned(_f32(2), ("b",)))  # names are static: retrace
    assert len(traces) == 2


def test_axis_metadata_is_abstract_and_extensible() -> None:
    with pytest.raises(TypeError, match="abstract"):
        pm.AxisMetadata(_f32(1))  # pyright: ignore[reportAbstractUsage]

    class Counted(pm.AxisMetadata):
        """A box that counts the axes added by transforms."""

        value: Any
        added: int = pm.field(static=True, default=0)

        def unbox(self) -> Any:
            return self.value

        def add_axis(self, index: int, params: Mapping[Any, Any]) -> "Counted":
            return self.replace(added=self.added + 1)

        def remove_axis(self, index: int, params: Mapping[Any, Any]) -> "Counted":
            return self.replace(added=self.added - 1)

    c = Counted(_f32(2))
    assert c.add_axis(0, {}).added == 1
    assert c.add_axis(0, {}).remove_axis(0, {}) == c
    assert pm.unbox({"c": c})["c"] is c.value
    _, state, rest = pm.partition({"c": c}, "params")
    assert isinstance(state["c"], Counted)
    assert rest == {}


def test_tree_add_and_remove_axis_call_every_box() -> None:
    tree = {
        "w": pm.Partitioned(_f32(4, 8), ("embed", "mlp")),
        "param": pm.Param(pm.Partitioned(_f32(8), ("mlp",))),
        "plain": _f32(3),
        "n": 2,
    }
    added = pm.add_axis(tree, 0, LAYERS)
    assert added["w"].names == ("layers", "embed", "mlp")
    assert added["param"].value.names == ("layers", "mlp")
    assert added["plain"] is tree["plain"]
    assert added["n"] == 2
    assert added["w"].value is tree["w"].value  # only metadata changes
    back = pm.remove_axis(added, 0, LAYERS)
    assert back == tree


def test_tree_remove_axis_with_wrong_name_raises() -> None:
    tree = {"w": pm.Partitioned(_f32(3, 4), ("layers", "embed"))}
    with pytest.raises(pm.AxisMetadataError, match="expected axis name 'heads'"):
        pm.remove_axis(tree, 0, {pm.PARTITION_NAME: "heads"})


def test_tree_add_axis_without_params_adds_none() -> None:
    tree = [pm.Partitioned(_f32(2), ("a",))]
    assert pm.add_axis(tree, 1)[0].names == ("a", None)


def test_map_boxes_hands_the_outer_box() -> None:
    inner = pm.Partitioned(_f32(2), ("a",))
    seen: list[Any] = []
    out = pm.map_boxes(lambda b: seen.append(b) or 7, {"o": pm.Partitioned(inner, ("b",)), "x": 1})
    assert out == {"o": 7, "x": 1}
    assert len(seen) == 1 and seen[0].names == ("b",)


def test_vmap_uses_the_tree_level_add_axis(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, Any]] = []
    original = pm.Partitioned.add_axis

    def spy(self: pm.Partitioned, index: int, params: Mapping[Any, Any]) -> pm.Partitioned:
        calls.append((index, dict(params)))
        return original(self, index, params)

    monkeypatch.setattr(pm.Partitioned, "add_axis", spy)
    out = pm.vmap(
        lambda x: pm.Partitioned(x, ("embed",)),
        metadata_params={pm.PARTITION_NAME: "batch"},
    )(_f32(3, 4))
    assert out.names == ("batch", "embed")
    assert calls == [(0, {pm.PARTITION_NAME: "batch"})]
