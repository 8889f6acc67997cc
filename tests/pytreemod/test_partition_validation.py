"""combine / from_variables check shapes and dtypes, and keep box metadata for plain arrays."""

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import pytreemod as pm


class Head(pm.Module):
    kernel: pm.Param
    bias: pm.Param
    mean: pm.BatchStat


def make_head(n_in: int = 4) -> Head:
    kernel = pm.Partitioned(jnp.ones((n_in, 2)), ("embed", "mlp"))
    return Head(pm.Param(kernel), pm.Param(jnp.zeros(2)), pm.BatchStat(jnp.zeros(2)))


def test_from_variables_rejects_a_wrong_shape() -> None:
    variables = pm.to_variables(make_head(5))
    with pytest.raises(
        pm.StateMismatchError,
        match=r"variables\['params'\]\.kernel is float32\[5, 2\], but the model has "
        r"float32\[4, 2\] there",
    ):
        pm.from_variables(make_head(4), variables)


def test_combine_rejects_a_wrong_shape_or_dtype() -> None:
    structure, params, rest = pm.partition(make_head(), "params")
    params = dict(params, bias=jnp.zeros(3))
    with pytest.raises(pm.StateMismatchError, match=r"\.bias is float32\[3\], but the model has"):
        pm.combine(structure, params, rest)
    params = dict(params, bias=jnp.zeros(2, jnp.bfloat16))
    with pytest.raises(pm.StateMismatchError, match=r"bfloat16\[2\], but the model has float32"):
        pm.combine(structure, params, rest)


def test_check_false_accepts_intended_changes() -> None:
    structure, params, rest = pm.partition(make_head(), "params")
    halved = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    model = pm.combine(structure, halved, rest, check=False)
    assert model.bias.value.dtype == jnp.bfloat16
    variables = pm.to_variables(make_head(3))
    assert pm.from_variables(make_head(4), variables, check=False).kernel.shape == (3, 2)


def test_plain_arrays_get_their_boxes_back() -> None:
    head = make_head()
    structure, params, rest = pm.partition(head, "params")
    plain = pm.unbox(params)
    assert not pm.is_box(plain["kernel"])
    rebuilt = pm.combine(structure, plain, rest)
    assert isinstance(rebuilt.kernel.value, pm.Partitioned)
    assert rebuilt.kernel.value.names == ("embed", "mlp")
    assert rebuilt.kernel.value.value is plain["kernel"]
    # from_variables too, and the box given in the state wins over the template's.
    variables = pm.unbox(pm.to_variables(head))
    assert pm.from_variables(head, variables).kernel.value.names == ("embed", "mlp")
    variables["params"]["kernel"] = pm.Partitioned(jnp.ones((4, 2)), ("a", "b"))
    assert pm.from_variables(head, variables).kernel.value.names == ("a", "b")


def test_nested_boxes_come_back_in_order() -> None:
    inner = pm.Partitioned(jnp.ones(3), ("x",))
    tree = {"w": pm.Param(pm.LogicallyPartitioned(inner, ("y",)))}
    structure, state = pm.partition(tree)
    rebuilt = pm.combine(structure, pm.unbox(pm.unbox(state)))
    outer = rebuilt["w"].value
    assert type(outer) is pm.LogicallyPartitioned and outer.names == ("y",)
    assert type(outer.value) is pm.Partitioned and outer.value.names == ("x",)


def test_structure_keeps_no_array_alive() -> None:
    structure = pm.structure_of(make_head())
    specs = [s for s in structure.specs or () if s is not None]
    assert [s.shape for s in specs] == [(4, 2), (2,), (2,)]
    assert specs[0].boxes[0].value is None


def test_checks_run_on_tracers_inside_jit() -> None:
    head = make_head()
    structure, params, rest = pm.partition(head, "params")

    @jax.jit
    def step(params: Any, rest: Any) -> Any:
        model = pm.combine(structure, params, rest)
        return model.kernel.value.value.sum() + model.bias.value.sum()

    assert float(step(pm.unbox(params), rest)) == 8.0
    wrong = dict(params, bias=jnp.zeros(5))
    with pytest.raises(pm.StateMismatchError, match=r"\.bias is float32\[5\]"):
        step(wrong, rest)


def test_optax_updates_keep_the_partitioning() -> None:
    head = make_head()
    structure, params, rest = pm.partition(head, "params")
    optimizer = optax.sgd(0.1)
    plain = pm.unbox(params)
    opt_state = optimizer.init(plain)
    grads = jax.tree.map(jnp.ones_like, plain)
    updates, _ = optimizer.update(grads, opt_state)
    new = pm.combine(structure, cast(pm.State, optax.apply_updates(plain, updates)), rest)
    assert new.kernel.value.names == ("embed", "mlp")
    np.testing.assert_allclose(new.kernel.value.value, 0.9)


def test_float0_gradients_of_integer_slots_are_accepted() -> None:
    tree = {"step": pm.BatchStat(jnp.zeros((), jnp.int32)), "w": pm.Param(jnp.ones(2))}
    structure, state = pm.partition(tree)
    zero = np.zeros((), dtype=jax.dtypes.float0)
    rebuilt = pm.combine(structure, {"step": zero, "w": state["w"]})
    assert rebuilt["step"].value.dtype == jax.dtypes.float0


def test_skeleton_templates_and_equality() -> None:
    skeleton = pm.eval_shape(make_head)
    variables = pm.to_variables(make_head())
    assert pm.from_variables(skeleton, variables).kernel.shape == (4, 2)
    with pytest.raises(pm.StateMismatchError, match=r"float32\[3, 2\], but the model has"):
        pm.from_variables(skeleton, pm.to_variables(make_head(3)))
    # Specs are not part of a Structure's identity.
    assert pm.structure_of(make_head(3)) == pm.structure_of(make_head(4))


class Strict(pm.AxisMetadata):
    """A user box whose replace_boxed validates its value."""

    value: Any

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Any) -> "Strict":
        return self

    def remove_axis(self, index: int, params: Any) -> "Strict":
        return self

    def replace_boxed(self, value: Any) -> "Strict":
        if value is None:
            raise ValueError("Strict needs an array")
        return Strict(value)


def test_boxes_that_refuse_templates_are_not_checked() -> None:
    tree = {"s": pm.Param(Strict(jnp.ones(2))), "w": pm.Param(jnp.ones(2))}
    structure, state = pm.partition(tree)
    assert structure.specs is not None and structure.specs[0] is None
    rebuilt = pm.combine(structure, dict(state, s=jnp.ones(5)))
    assert rebuilt["s"].value.shape == (5,)  # no spec: passed through unchecked
    with pytest.raises(pm.StateMismatchError, match=r"\.w is float32\[3\]"):
        pm.combine(structure, dict(state, w=jnp.ones(3)))
