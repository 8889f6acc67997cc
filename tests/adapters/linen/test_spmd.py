"""Logical axis names: resolution to mesh axes, constraints, boxes, and the legacy
``partitioning`` helpers (``param_with_axes``, ``get_axis_names``, ``scan_with_axes``)."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import adapters.linen as nn
from adapters.linen import partitioning, spmd

RULES = (("batch", "data"), ("mlp", "model"), ("embed", None))
UNCONSTRAINED = P.UNCONSTRAINED


@pytest.mark.parametrize(
    ("rules", "names", "expected"),
    [
        (RULES, ("batch", "embed", "mlp"), P("data", None, "model")),
        (
            (("a", "model"), ("b", "model"), ("c", "data")),
            ("b", "a", "c"),
            P(None, "model", "data"),
        ),
        ((("a", ("model", "data")), ("b", "data")), ("a", "b"), P(("model", "data"), None)),
        ((("a", None), ("a", "model")), ("a", "b"), P(None, None)),
        ((("foo", "data"),), ("foo", UNCONSTRAINED, None), P("data", UNCONSTRAINED, None)),
        ((("bar", UNCONSTRAINED),), ("bar",), P(UNCONSTRAINED)),
        ((), ("a", "b"), P(None, None)),
    ],
)
def test_logical_to_mesh_axes(rules: Any, names: Any, expected: P) -> None:
    assert nn.logical_to_mesh_axes(names, rules) == expected


def test_active_rules_nest_and_restore() -> None:
    assert nn.get_logical_axis_rules() == ()
    with nn.logical_axis_rules(RULES):
        assert nn.logical_to_mesh_axes(("batch",)) == P("data")
        with partitioning.axis_rules((("batch", "model"),)):
            assert partitioning.get_axis_rules() == (("batch", "model"),)
            assert nn.logical_to_mesh_axes(("batch",)) == P("model")
        assert nn.get_logical_axis_rules() == RULES
    assert nn.logical_to_mesh_axes(None) is None


def test_resolution_errors() -> None:
    with pytest.raises(ValueError, match=r"Dimensions \('a',\) occur more than once"):
        nn.logical_to_mesh_axes(("a", "a"), RULES)
    with pytest.raises(ValueError, match="Unknown axis rule specification type"):
        nn.logical_to_mesh_axes(("a",), {"a": "data"})


def test_trees_of_specs_to_mesh_and_shardings() -> None:
    tree = {"w": P("embed", "mlp"), "b": P("mlp")}
    assert nn.logical_to_mesh(tree, RULES) == {"w": P(None, "model"), "b": P("model")}
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    shardings = nn.logical_to_mesh_sharding(tree, mesh, RULES)
    assert shardings["w"] == jax.sharding.NamedSharding(mesh, P(None, "model"))


def test_with_logical_constraint_without_rules_or_mesh_is_identity() -> None:
    x = jnp.ones((4, 2))
    assert nn.with_logical_constraint(x, ("batch", "mlp")) is x
    with nn.logical_axis_rules(RULES):
        assert nn.with_logical_constraint(x, None) is x
        assert nn.with_logical_constraint(x, ("batch", "mlp")) is x  # no mesh


def test_with_logical_constraint_on_a_mesh() -> None:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    @jax.jit
    def f(x: jax.Array) -> jax.Array:
        return nn.with_logical_constraint(2 * x, ("batch", "mlp"), rules=RULES, mesh=mesh)

    y = f(jnp.ones((8, 4)))
    assert y.sharding.spec == P("data", "model")
    np.testing.assert_array_equal(y, 2.0)


def test_fallbacks_for_names_without_a_rule() -> None:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jnp.ones((8, 4))
    with pytest.raises(ValueError, match="did not match a rule"):
        nn.with_logical_constraint(
            x, ("batch", "other"), rules=RULES, mesh=mesh, fallback=spmd.RulesFallback.RAISE_ERROR
        )
    kept = nn.with_logical_constraint(
        x, ("batch", "other"), rules=RULES, mesh=mesh, fallback=spmd.RulesFallback.NO_CONSTRAINT
    )
    assert kept is x


def test_logically_partitioned_parameters() -> None:
    init = nn.with_logical_partitioning(jax.nn.initializers.ones, ("embed", "mlp"))
    variables = nn.Dense(4, kernel_init=init).init(jax.random.key(0), jnp.ones((2, 3)))
    box = variables["params"]["kernel"]
    assert isinstance(box, nn.LogicallyPartitioned) and box.names == ("embed", "mlp")
    with nn.logical_axis_rules(RULES):
        specs = nn.get_partition_spec(variables)
        # As Flax: the spec holds the logical names; the rules map them to mesh axes.
        assert specs["params"]["kernel"] == P("embed", "mlp")
        assert nn.logical_to_mesh(specs)["params"]["kernel"] == P(None, "model")


class _WithAxes(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = partitioning.param_with_axes(
            "w", jax.nn.initializers.ones, (x.shape[-1], 4), axes=("embed", "mlp")
        )
        count = partitioning.variable_with_axes("stats", "count", jnp.zeros, (4,), axes=("mlp",))
        count.value = count.value + 1
        return x @ w


def test_param_with_axes_records_axis_names() -> None:
    variables = _WithAxes().init(jax.random.key(0), jnp.ones((2, 3)))
    assert set(variables) == {"params", "params_axes", "stats", "stats_axes"}
    names = partitioning.get_axis_names(variables["params_axes"])
    assert names == {"w": P("embed", "mlp")}
    assert partitioning.get_axis_names(variables["stats_axes"]) == {"count": P("mlp")}
    np.testing.assert_array_equal(variables["stats"]["count"], 1.0)


def test_sowing_different_axes_twice_is_an_error() -> None:
    class Twice(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            self.sow(
                "params_axes",
                "w_axes",
                partitioning.AxisMetadata(("a",)),
                reduce_fn=partitioning._sow_axes_reduce,
            )
            self.sow(
                "params_axes",
                "w_axes",
                partitioning.AxisMetadata(("b",)),
                reduce_fn=partitioning._sow_axes_reduce,
            )
            return x

    with pytest.raises(ValueError, match="expected them to match"):
        Twice().init(jax.random.key(0), jnp.ones(2))


def test_scan_with_axes_adds_the_layer_axis() -> None:
    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, _: Any) -> tuple[jax.Array, None]:
            w = partitioning.param_with_axes(
                "w", jax.nn.initializers.ones, (3, 3), axes=("embed", "mlp")
            )
            return x @ w, None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            scanned = partitioning.scan_with_axes(
                Layer, variable_axes={"params": 0}, split_rngs={"params": True}, length=2
            )
            return scanned()(x, None)[0]

    variables = Stack().init(jax.random.key(0), jnp.ones((1, 3)))
    assert variables["params"]["Map_variablesScanLayer_0"]["w"].shape == (2, 3, 3)
    axes = partitioning.get_axis_names(variables["params_axes"])
    assert axes["Map_variablesScanLayer_0"]["w"] == P("layers", "embed", "mlp")


def test_axis_metadata_sow_and_remat_errors() -> None:
    reduce = partitioning._sow_axes_reduce
    with pytest.raises(TypeError, match="Expected newly sown value to be an AxisMetadata"):
        reduce((), ("a",))
    with pytest.raises(AssertionError, match="Non-initial-or-AxisMetadata value encountered"):
        reduce(("x",), partitioning.AxisMetadata(("a",)))
    assert reduce((), partitioning.AxisMetadata(("a",))) == partitioning.AxisMetadata(("a",))
    with pytest.raises(NotImplementedError, match="The concrete argument is deprecated"):
        partitioning.core_remat_static(lambda scope, x: x, concrete=True)


def test_variable_with_axes_missing_in_an_immutable_collection() -> None:
    with pytest.raises(Exception, match="stats") as info:
        _WithAxes().apply({"params": {"w": jnp.ones((3, 4))}}, jnp.ones((2, 3)))
    assert type(info.value).__name__ == "ScopeVariableNotFoundError"


def test_vmap_with_axes_checks_the_axis_it_removes() -> None:
    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            w = partitioning.param_with_axes("w", jax.nn.initializers.ones, (3,), axes=("embed",))
            return x * w

    vmapped = partitioning.vmap_with_axes(
        Layer,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        partitioning_axis_names={"params": "heads"},
    )
    variables = vmapped().init(jax.random.key(0), jnp.ones((2, 3)))
    axes = partitioning.get_axis_names(variables["params_axes"])
    assert axes == {"w": P("heads", "embed")}
    wrong = jax.tree.map(
        lambda m: m.replace(names=("other", "embed")),
        variables["params_axes"],
        is_leaf=lambda m: isinstance(m, partitioning.AxisMetadata),
    )
    with pytest.raises(ValueError, match="Expected axis heads at position 0"):
        vmapped().apply({"params": variables["params"], "params_axes": wrong}, jnp.ones((2, 3)))
