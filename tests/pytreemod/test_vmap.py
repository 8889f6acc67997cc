"""pm.vmap: JAX-style axes over modules, StateAxes, aliasing checks, ensembles, metadata."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm

ENSEMBLE = {pm.PARTITION_NAME: "ensemble"}


class Linear(pm.Module):
    weight: pm.Param
    bias: pm.Param
    name: str = pm.field(static=True, default="lin")

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value


class Norm(pm.Module):
    scale: pm.Param
    mean: pm.BatchStat

    def __call__(self, x: jax.Array) -> jax.Array:
        return (x - self.mean.value) * self.scale.value


class Tied(pm.Module):
    a: pm.Param
    b: pm.Param


class Holder(pm.Module):
    v: pm.Param


class Boxed(pm.Module):
    weight: pm.Param
    bias: pm.Param

    def __init__(self, key: jax.Array):
        init = pm.with_partitioning(jax.nn.initializers.normal(1.0), ("embed", "mlp"))
        self.weight = pm.Param(init(key, (3, 4), jnp.float32))
        self.bias = pm.Param(jnp.zeros(4, dtype=jnp.float32))


class MLP(pm.Module):
    w1: pm.Param
    w2: pm.Param
    act: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jax.nn.gelu)

    def __init__(self, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.w1 = pm.Param(jax.random.normal(k1, (3, 5), dtype=jnp.float32))
        self.w2 = pm.Param(jax.random.normal(k2, (5, 2), dtype=jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(x @ self.w1.value) @ self.w2.value


def _arange(*shape: int) -> jax.Array:
    return jnp.arange(int(np.prod(shape)), dtype=jnp.float32).reshape(shape) / 10.0


# --- JAX semantics for module arguments --------------------------------------------------------


def test_in_axes_per_module_means_what_jax_means() -> None:
    # m1 is batched on axis 1 of every array, m2 on axis 0.
    m1 = Linear(pm.Param(_arange(3, 4, 2)), pm.Param(_arange(2, 4)))
    m2 = Norm(pm.Param(_arange(4, 2) + 1.0), pm.BatchStat(_arange(4, 2) - 0.3))
    x = _arange(3)

    out = pm.vmap(lambda a, b: b(a(x)), in_axes=(1, 0))(m1, m2)

    d1 = {"w": m1.weight.value, "b": m1.bias.value}
    d2 = {"s": m2.scale.value, "m": m2.mean.value}
    expected = jax.vmap(lambda a, b: (x @ a["w"] + a["b"] - b["m"]) * b["s"], in_axes=(1, 0))(
        d1, d2
    )
    assert out.shape == (4, 2)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_in_axes_none_broadcasts_module() -> None:
    m = Linear(pm.Param(_arange(3, 2)), pm.Param(_arange(2)))
    xs = _arange(5, 3)
    seen: list[tuple[int, ...]] = []

    def f(m: Linear, x: jax.Array) -> jax.Array:
        seen.append(m.weight.value.shape)
        return m(x)

    out = pm.vmap(f, in_axes=(None, 0))(m, xs)
    assert seen == [(3, 2)]
    np.testing.assert_allclose(out, xs @ m.weight.value + m.bias.value[None], rtol=1e-6)


def test_single_int_in_axes_applies_to_every_argument() -> None:
    a, b = _arange(2, 3), _arange(2, 3) + 1.0
    out = pm.vmap(lambda a, b: a * b, in_axes=1)(a, b)
    np.testing.assert_allclose(out, (a * b).T)


def test_dict_prefix_in_axes() -> None:
    tree = {"x": _arange(2, 3), "y": _arange(3)}
    out = pm.vmap(lambda t: t["x"] + t["y"], in_axes=({"x": 1, "y": 0},))(tree)
    expected = jax.vmap(lambda t: t["x"] + t["y"], in_axes=({"x": 1, "y": 0},))(tree)
    np.testing.assert_allclose(out, expected)


def test_non_array_leaves_pass_through_unmapped() -> None:
    seen = []

    def f(x: jax.Array, fn: Callable[[jax.Array], jax.Array], label: str) -> dict[str, Any]:
        seen.append((fn, label))
        return {label: fn(x)}

    out = pm.vmap(f)(_arange(3, 2), jnp.sin, "s")
    assert seen == [(jnp.sin, "s")]
    np.testing.assert_allclose(out["s"], jnp.sin(_arange(3, 2)), rtol=1e-6)


def test_kwargs_are_mapped_on_axis_0() -> None:
    xs = _arange(4, 3)
    m = Linear(pm.Param(_arange(3, 2)), pm.Param(_arange(2)))
    out = pm.vmap(lambda m, *, x: m(x), in_axes=(None,))(m, x=xs)
    np.testing.assert_allclose(out, xs @ m.weight.value + m.bias.value[None], rtol=1e-6)


# --- StateAxes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "axes",
    [
        pm.StateAxes({"params": 0, "batch_stats": None}),
        pm.StateAxes({pm.BatchStat: None, pm.Param: 0}),
        pm.StateAxes({"batch_stats": None, ...: 0}),
    ],
)
def test_state_axes_per_collection(axes: pm.StateAxes) -> None:
    m = Norm(pm.Param(_arange(4, 2) + 1.0), pm.BatchStat(_arange(2)))
    x = _arange(2) + 2.0
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def f(m: Norm, x: jax.Array) -> jax.Array:
        seen.append((m.scale.value.shape, m.mean.value.shape))
        return m(x)

    out = pm.vmap(f, in_axes=(axes, None))(m, x)
    assert seen == [((2,), (2,))]
    np.testing.assert_allclose(out, (x - m.mean.value)[None] * m.scale.value, rtol=1e-6)


def test_state_axes_missing_collection_names_path_and_collection() -> None:
    m = Norm(pm.Param(_arange(4, 2)), pm.BatchStat(_arange(2)))
    with pytest.raises(pm.TransformError, match=r"args\[0\]\.mean.*'batch_stats'.*\.\.\.: None"):
        pm.vmap(lambda m: m.scale.value, in_axes=(pm.StateAxes({"params": 0}),))(m)
    with pytest.raises(pm.TransformError, match=r"output\.mean.*'batch_stats'"):
        pm.vmap(lambda m: m, in_axes=0, out_axes=pm.StateAxes({"params": 0}))(
            Norm(pm.Param(_arange(4, 2)), pm.BatchStat(_arange(4, 2)))
        )


def test_state_axes_rejects_bad_axis_value() -> None:
    with pytest.raises(pm.TransformError, match=r"StateAxes values must be an int axis"):
        pm.StateAxes({"params": "zero"})


def test_state_axes_on_outputs() -> None:
    m = Norm(pm.Param(_arange(4, 2) + 1.0), pm.BatchStat(_arange(2)))
    axes = pm.StateAxes({"params": 0, "batch_stats": None})

    def f(m: Norm) -> Norm:
        return m.replace(scale=pm.Param(m.scale.value * 2.0))

    out = pm.vmap(f, in_axes=(axes,), out_axes=axes)(m)
    assert type(out) is Norm
    np.testing.assert_allclose(out.scale.value, 2.0 * m.scale.value)
    np.testing.assert_allclose(out.mean.value, m.mean.value)  # unmapped, not stacked
    # Params on axis 1 of the output.
    out1 = pm.vmap(f, in_axes=(axes,), out_axes=pm.StateAxes({"params": 1, ...: None}))(m)
    np.testing.assert_allclose(out1.scale.value, 2.0 * m.scale.value.T)
    assert out1.mean.value.shape == (2,)


# --- spec errors ----------------------------------------------------------------------------


def test_in_axes_tuple_of_wrong_length() -> None:
    x = _arange(2, 3)
    with pytest.raises(pm.TransformError, match=r"vmap in_axes has 3 entries but .* got 2"):
        pm.vmap(lambda a, b: a + b, in_axes=(0, 0, 0))(x, x)
    with pytest.raises(pm.TransformError, match=r"has 1 entries but .* got 2"):
        pm.vmap(lambda a, b: a + b, in_axes=[0])(x, x)


def test_spec_prefix_that_does_not_fit() -> None:
    m = Linear(pm.Param(_arange(2, 3, 2)), pm.Param(_arange(2, 2)))
    with pytest.raises(pm.TransformError, match=r"does not fit the tree at args\[0\]\.weight"):
        pm.vmap(lambda m: m.bias.value, in_axes=((0, 1),))(m)
    with pytest.raises(pm.TransformError, match=r"does not fit the tree at args\[0\]\.z"):
        pm.vmap(lambda t: t["z"], in_axes=({"x": 0},))({"z": _arange(2)})
    with pytest.raises(
        pm.TransformError, match=r"vmap out_axes: \(0, 1\) is not a valid axis spec at output\[1\]"
    ):
        pm.vmap(lambda x: (x, x), out_axes=(0, (0, 1)))(_arange(2))


def test_carry_is_rejected_in_vmap() -> None:
    x = _arange(2, 3)
    with pytest.raises(
        pm.TransformError, match=r"Carry \(at args\[1\]\) is only meaningful in scan"
    ):
        pm.vmap(lambda a, b: a, in_axes=(0, pm.Carry))(x, x)
    m = Norm(pm.Param(_arange(2, 2)), pm.BatchStat(_arange(2)))
    with pytest.raises(pm.TransformError, match=r"Carry \(at args\[0\]\.mean\)"):
        pm.vmap(lambda m: m.scale.value, in_axes=pm.StateAxes({"params": 0, ...: pm.Carry}))(m)


# --- shared variables ---------------------------------------------------------------------------


def test_shared_variable_with_different_axes_rejected() -> None:
    p = pm.Param(_arange(2, 2))
    h1, h2 = Holder(p), Holder(p)
    with pytest.raises(
        pm.TransformError, match=r"args\[0\]\.v and args\[1\]\.v are the same Variable"
    ):
        pm.vmap(lambda a, b: a.v.value + b.v.value, in_axes=(0, 1))(h1, h2)
    with pytest.raises(pm.TransformError, match=r"args\[0\]\.v and args\[1\]\.v"):
        pm.vmap(lambda a, b: a.v.value, in_axes=(0, None))(h1, h2)
    # Inside one argument: a StateAxes that splits the alias pair.
    tied = Tied(p, p)
    split = pm.StateAxes({pm.PathContains("a"): 0, ...: None})
    with pytest.raises(pm.TransformError, match=r"args\[0\]\.a and args\[0\]\.b .* \(0 and None\)"):
        pm.vmap(lambda t: t.a.value, in_axes=(split,))(tied)


def test_shared_variable_with_same_axes_is_fine_and_stays_shared() -> None:
    p = pm.Param(_arange(3, 2))
    inside: list[bool] = []

    def f(a: Holder, b: Holder) -> Tied:
        inside.append(a.v is b.v)
        return Tied(a.v, b.v)

    out = pm.vmap(f, in_axes=(0, 0))(Holder(p), Holder(p))
    assert inside == [True]
    assert out.a is out.b
    np.testing.assert_allclose(out.a.value, p.value)


def test_shared_output_variable_needs_one_axis() -> None:
    p = pm.Param(_arange(3, 2))
    with pytest.raises(pm.TransformError, match=r"vmap out_axes: output\.a and output\.b"):
        pm.vmap(lambda h: Tied(h.v, h.v), out_axes=pm.StateAxes({pm.PathContains("a"): 0, ...: 1}))(
            Holder(p)
        )


# --- out_axes -------------------------------------------------------------------------------------


def test_out_axes_none_negative_and_nested() -> None:
    xs = _arange(4, 3)
    c = jnp.ones(2, dtype=jnp.float32)
    out = pm.vmap(lambda x, c: (x * 2.0, c), in_axes=(0, None), out_axes=(-1, None))(xs, c)
    np.testing.assert_allclose(out[0], (xs * 2.0).T)
    assert out[1].shape == (2,)
    out = pm.vmap(lambda x: {"a": x, "b": x + 1.0}, out_axes={"a": 1, "b": 0})(xs)
    np.testing.assert_allclose(out["a"], xs.T)
    np.testing.assert_allclose(out["b"], xs + 1.0)


def test_identity_with_transposing_out_axes() -> None:
    # A module is just a pytree: in_axes=0, out_axes=1 transposes, as in JAX.
    m = Linear(pm.Param(_arange(2, 3, 4)), pm.Param(_arange(2, 4)))
    out = pm.vmap(lambda m: m, in_axes=0, out_axes=1)(m)
    assert type(out) is Linear and out.name == "lin"
    np.testing.assert_allclose(out.weight.value, jnp.moveaxis(m.weight.value, 0, 1))
    np.testing.assert_allclose(out.bias.value, m.bias.value.T)


# --- axis_name / axis_size ----------------------------------------------------------------------


def test_axis_name_with_psum() -> None:
    xs = _arange(4, 3)
    out = pm.vmap(lambda x: x / jax.lax.psum(jnp.sum(x), "batch"), axis_name="batch")(xs)
    np.testing.assert_allclose(out, xs / jnp.sum(xs), rtol=1e-6)


def test_axis_size_without_mapped_inputs() -> None:
    out = pm.vmap(lambda: jnp.arange(3, dtype=jnp.float32), axis_size=5)()
    assert out.shape == (5, 3)
    m = Linear(pm.Param(_arange(3, 2)), pm.Param(_arange(2)))
    stacked = pm.vmap(lambda m: m, in_axes=None, axis_size=4)(m)
    assert stacked.weight.value.shape == (4, 3, 2)
    np.testing.assert_allclose(stacked.weight.value[2], m.weight.value)


# --- ensembles and axis metadata ---------------------------------------------------------------


def test_ensemble_creation_matches_individual_inits(getkey: Callable[[], jax.Array]) -> None:
    keys = jax.random.split(getkey(), 4)
    ensemble = pm.vmap(MLP)(keys)
    assert ensemble.w1.value.shape == (4, 3, 5) and ensemble.act is jax.nn.gelu
    for i in range(4):
        single = MLP(keys[i])
        np.testing.assert_allclose(ensemble.w1.value[i], single.w1.value, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ensemble.w2.value[i], single.w2.value, rtol=1e-6, atol=1e-6)
    # Members differ from each other.
    assert not np.allclose(ensemble.w1.value[0], ensemble.w1.value[1])
    # And the ensemble runs vmapped.
    x = _arange(3)
    ys = pm.vmap(lambda m: m(x))(ensemble)
    np.testing.assert_allclose(ys[3], MLP(keys[3])(x), rtol=1e-5, atol=1e-6)


def test_partitioned_boxes_get_axis_on_output(getkey: Callable[[], jax.Array]) -> None:
    keys = jax.random.split(getkey(), 3)
    ensemble = pm.vmap(Boxed, metadata_params=ENSEMBLE)(keys)
    box = ensemble.weight.value
    assert isinstance(box, pm.Partitioned)
    assert box.names == ("ensemble", "embed", "mlp")
    assert box.value.shape == (3, 3, 4)
    # Without metadata_params the new axis is unnamed.
    plain = pm.vmap(Boxed)(keys)
    assert plain.weight.value.names == (None, "embed", "mlp")
    # On another output axis the name goes there.
    moved = pm.vmap(Boxed, out_axes=1, metadata_params=ENSEMBLE)(keys)
    assert moved.weight.value.names == ("embed", "ensemble", "mlp")
    assert moved.weight.value.value.shape == (3, 3, 4)
    np.testing.assert_allclose(moved.weight.value.value[:, 1], box.value[1])


def test_partitioned_boxes_lose_axis_inside(getkey: Callable[[], jax.Array]) -> None:
    ensemble = pm.vmap(Boxed, metadata_params=ENSEMBLE)(jax.random.split(getkey(), 3))
    seen: list[tuple[Any, ...]] = []
    x = _arange(3)

    def apply(m: Boxed) -> jax.Array:
        seen.append(m.weight.value.names)
        return x @ m.weight.value.value + m.bias.value

    ys = pm.vmap(apply, metadata_params=ENSEMBLE)(ensemble)
    assert seen == [("embed", "mlp")]
    assert ys.shape == (3, 4)
    # Returning the member re-adds the axis name.
    back = pm.vmap(lambda m: m, metadata_params=ENSEMBLE)(ensemble)
    assert back.weight.value.names == ("ensemble", "embed", "mlp")
    # Wrong metadata_params: the box refuses to drop an axis with another name.
    with pytest.raises(pm.AxisMetadataError, match=r"expected axis name 'layers'"):
        pm.vmap(apply, metadata_params={pm.PARTITION_NAME: "layers"})(ensemble)


def test_jit_of_vmap(getkey: Callable[[], jax.Array]) -> None:
    ensemble = pm.vmap(MLP)(jax.random.split(getkey(), 2))
    x = _arange(3)
    f = pm.jit(lambda e, x: pm.vmap(lambda m: m(x))(e))
    np.testing.assert_allclose(f(ensemble, x), pm.vmap(lambda m: m(x))(ensemble), rtol=1e-6)


def test_vmap_bool_axis_is_rejected() -> None:
    with pytest.raises(pm.TransformError, match=r"vmap in_axes: False at .* is not an axis"):
        pm.vmap(lambda x: x, in_axes=False)(jnp.ones(3))


class _Reduced(pm.AxisMetadata):
    """Stores the mean over a mapped axis and broadcasts it back when the axis is removed."""

    value: Any

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Any) -> "_Reduced":
        return self.replace(value=jnp.mean(self.value, axis=index))

    def remove_axis(self, index: int, params: Any) -> "_Reduced":
        shape = list(self.value.shape)
        shape.insert(index, params["size"])
        return self.replace(value=jnp.broadcast_to(self.value, shape))


def test_box_axes_change_outside_the_mapping() -> None:
    # remove_axis sees the stacked input before the mapping (it may broadcast a stored
    # value to the mapped size), add_axis the stacked output after it.
    seen: list[tuple[int, ...]] = []

    def f(box: _Reduced, x: jax.Array) -> tuple[_Reduced, jax.Array]:
        seen.append(box.value.shape)
        return box.replace(value=box.value + x), box.value * x

    box = _Reduced(jnp.asarray(2.0))
    out, ys = pm.vmap(f, metadata_params={"size": 3})(box, _arange(3))
    assert seen == [()]
    np.testing.assert_allclose(ys, 2.0 * _arange(3), rtol=1e-6)
    assert out.value.shape == ()
    np.testing.assert_allclose(out.value, 2.0 + jnp.mean(_arange(3)), rtol=1e-6)
