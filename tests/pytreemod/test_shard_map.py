"""``pm.shard_map``: prefixes of specs over modules, shared Variables, static leaves,
per-Variable specs from boxes, and the errors for specs that do not fit (8 CPU devices)."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import pytreemod as pm


class Affine(pm.Module):
    w: pm.Param
    b: pm.Param
    act: Callable[[jax.Array], jax.Array]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(x @ self.w.value + self.b.value[None])


class Tied(pm.Module):
    first: pm.Param
    second: pm.Param


def _mesh(shape: tuple[int, ...], names: tuple[str, ...], kind: AxisType = AxisType.Auto) -> Any:
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(shape))


MESH = _mesh((8,), ("data",))


def _affine(n_in: int = 4, n_out: int = 2) -> Affine:
    w = jnp.arange(n_in * n_out, dtype=jnp.float32).reshape(n_in, n_out) / 10
    return Affine(pm.Param(w), pm.Param(jnp.ones(n_out)), jnp.tanh)


def test_a_module_replicated_and_a_batch_split() -> None:
    model, x = _affine(), jnp.ones((16, 4))
    seen = []

    def f(m: Affine, x: jax.Array) -> tuple[Affine, jax.Array]:
        seen.append((m.w.value.shape, x.shape))
        return m, m(x)

    m2, y = pm.shard_map(f, mesh=MESH, in_specs=(P(), P("data")), out_specs=(P(), P("data")))(
        model, x
    )
    assert seen == [((4, 2), (2, 4))]  # the model whole, 2 rows of the batch per device
    np.testing.assert_allclose(y, model(x), rtol=1e-6)
    assert isinstance(m2, Affine) and m2.act is jnp.tanh  # static leaves come back as they were
    assert isinstance(m2.w, pm.Param)
    assert y.sharding == jax.sharding.NamedSharding(MESH, P("data"))


def test_per_variable_specs_from_partitioned_boxes() -> None:
    mesh = _mesh((2, 4), ("data", "model"))
    w = jnp.arange(32, dtype=jnp.float32).reshape(4, 8)
    model = {
        "w": pm.Param(pm.Partitioned(w, (None, "mlp"))),
        "scale": pm.Param(jnp.full((8,), 2.0)),
    }
    x = jnp.ones((4, 4))
    with pm.logical_axis_rules([("mlp", "model")]):
        specs = pm.get_partition_spec(model)

    @pm.shard_map(mesh=mesh, in_specs=(specs, P("data")), out_specs=P("data", "model"))
    def f(m: dict[str, Any], x: jax.Array) -> jax.Array:
        box = m["w"].value
        assert isinstance(box, pm.Partitioned) and box.value.shape == (4, 2)
        assert m["scale"].value.shape == (8,)  # no box: replicated
        return x @ box.value

    np.testing.assert_allclose(f(model, x), x @ w)


def test_a_shared_variable_is_one_array_and_comes_back_shared() -> None:
    v = pm.Param(jnp.ones(8))
    tied = Tied(v, v)

    def double(t: Tied) -> Tied:
        assert t.first is t.second
        doubled = pm.Param(t.first.value * 2)
        return Tied(doubled, doubled)

    out = pm.shard_map(double, mesh=MESH, in_specs=P("data"), out_specs=P("data"))(tied)
    assert out.first is out.second
    np.testing.assert_allclose(out.second.value, 2.0)


def test_none_in_specs_passes_arrays_unmapped() -> None:
    table = jnp.arange(3.0)

    def f(t: jax.Array, x: jax.Array) -> jax.Array:
        return x + t.sum()

    y = pm.shard_map(f, mesh=MESH, in_specs=(None, P("data")), out_specs=P("data"))(
        table, jnp.zeros(8)
    )
    np.testing.assert_allclose(y, 3.0)


def test_infer_reads_the_specs_from_explicit_types() -> None:
    mesh = _mesh((8,), ("data",), AxisType.Explicit)
    x = jax.device_put(jnp.arange(8.0), jax.sharding.NamedSharding(mesh, P("data")))
    seen = []

    def f(x: jax.Array) -> jax.Array:
        seen.append(x.shape)
        return x * 2

    np.testing.assert_allclose(pm.shard_map(f, mesh=mesh, out_specs=P("data"))(x), x * 2)
    assert seen == [(1,)]


def test_the_mesh_set_with_set_mesh_is_used() -> None:
    with jax.set_mesh(MESH):
        y = pm.shard_map(lambda x: x + 1, in_specs=P("data"), out_specs=P("data"))(jnp.zeros(8))
    np.testing.assert_allclose(y, 1.0)


# ------------------------------------------------------------------------- the errors


REPLICATED = P()


def _call(in_specs: Any, *args: Any, out_specs: Any = REPLICATED, **kwargs: Any) -> Any:
    return pm.shard_map(lambda *a, **k: a, mesh=MESH, in_specs=in_specs, out_specs=out_specs)(
        *args, **kwargs
    )


def test_a_spec_tree_that_does_not_fit_names_the_path() -> None:
    with pytest.raises(pm.TransformError, match=r"at args\[0\] is a dict .* Affine"):
        _call(({"w": P()},), _affine())
    with pytest.raises(pm.TransformError, match=r"at args\[1\]\.b is a tuple .* Param"):
        _call((P(), Affine(P(), (P(), P()), None)), _affine(), _affine())  # type: ignore[arg-type]


def test_one_entry_per_argument() -> None:
    with pytest.raises(pm.TransformError, match="has 1 entries but the function got 2"):
        _call((P(),), jnp.ones(8), jnp.ones(8))


def test_a_leaf_that_is_not_a_partition_spec() -> None:
    with pytest.raises(pm.TransformError, match=r"'data' at args\[0\] is not a PartitionSpec"):
        _call(("data",), jnp.ones(8))
    with pytest.raises(pm.TransformError, match=r"0 at out_specs\[1\] is not a PartitionSpec"):
        _call(P(), out_specs=(P(), 0))


def test_shared_variable_given_two_specs() -> None:
    v = pm.Param(jnp.ones(8))
    with pytest.raises(pm.TransformError, match=r"args\[0\] and args\[1\] are the same Variable"):
        _call((P(), P("data")), v, v)


def test_an_input_the_mesh_cannot_split() -> None:
    model = _affine(n_in=3)
    with pytest.raises(pm.ShardingError, match=r"at args\[0\]\.w: axis 0 of shape \(3, 2\)"):
        _call((P("data"),), model)
    with pytest.raises(pm.ShardingError, match=r"at args\[0\]\.b: .* names mesh axes \['x'\]"):
        _call((Affine(pm.Param(P()), pm.Param(P("x")), None),), model)  # type: ignore[arg-type]
    with pytest.raises(pm.ShardingError, match=r"at args\[0\]: P\(None, 'data'\) has 2 entries"):
        _call((P(None, "data"),), jnp.ones(8))


def test_no_mesh() -> None:
    with pytest.raises(pm.ShardingError, match="shard_map: no mesh"):
        pm.shard_map(lambda x: x, in_specs=P(), out_specs=P())(jnp.ones(8))


def test_keyword_arguments_are_refused() -> None:
    with pytest.raises(pm.TransformError, match=r"keyword arguments \['x'\]"):
        _call((), x=jnp.ones(8))


def test_an_output_array_given_none() -> None:
    with pytest.raises(pm.TransformError, match=r"None at output\[1\], which is an array"):
        pm.shard_map(lambda x: (x, x), mesh=MESH, in_specs=P(), out_specs=(P(), None))(jnp.ones(8))
