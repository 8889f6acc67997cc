"""Behaviours of ``adapters.core`` checked against ``flax.core`` (same keys, same errors)."""

import flax.core as fc
import flax.core.nn as fnn
import jax
import jax.numpy as jnp
import pytest

import adapters.core as ac
from adapters import config
from adapters.core import lift, meta, scope
from adapters.errors import PartitioningUnspecifiedError


def _model(nn):
    def model(s, x):
        h = s.child(nn.dense, "hidden")(x, 3)
        h = nn.dropout(s, h, 0.5)
        return s.child(nn.dense)(h, 2)

    return model


RNGS = {"params": jax.random.key(0), "dropout": jax.random.key(1)}


@pytest.mark.parametrize("fix_separator", [False, True])
def test_init_draws_flax_keys(fix_separator: bool) -> None:
    x = jnp.ones((2, 4))
    with config.temp_flip_flag("fix_rng_separator", fix_separator):
        fc_config = fc.scope.config
        fc_config.update("flax_fix_rng_separator", fix_separator)
        try:
            y_ref, v_ref = fc.init(_model(fnn))(RNGS, x)
        finally:
            fc_config.update("flax_fix_rng_separator", False)
        y, v = ac.init(_model(ac.nn))(RNGS, x)
    assert jnp.array_equal(y, y_ref)
    same = jax.tree.map(jnp.array_equal, ac.unfreeze(v), fc.unfreeze(v_ref))
    assert all(jax.tree.leaves(same))


def test_fold_in_static_matches_flax() -> None:
    key = jax.random.key(3)
    for data in [(), ("a",), ("dense", 0, 7), (255, 256, "ü")]:
        got = jax.random.key_data(scope._fold_in_static(key, data))
        want = jax.random.key_data(fc.scope._fold_in_static(key, data))
        assert jnp.array_equal(got, want)
    with pytest.raises(ValueError, match=r"Expected int or string, got: 1\.5"):
        scope._fold_in_static(key, (1.5,))


def test_filter_algebra() -> None:
    D = scope.DenyList
    assert scope.union_filters(["a", "b"], ["b", "c"]) == {"a", "b", "c"}
    assert scope.union_filters(D(["a", "b"]), D(["b", "c"])) == D({"b"})
    assert scope.union_filters(["b", "c"], D(["a", "b"])) == D({"a"})
    assert scope.intersect_filters(True, False) is False
    assert scope.intersect_filters(D(["a", "b"]), ["b", "c"]) == {"c"}
    assert scope.intersect_filters(D(["a"]), D(["b"])) == D({"a", "b"})
    assert scope.subtract_filters(True, "a") == D("a")
    assert scope.subtract_filters(True, True) is False
    assert scope.subtract_filters(D(["a", "b"]), D(["b", "c"])) == {"c"}
    assert scope.filter_to_set(False) == set()
    assert scope.in_filter(["one"], "one") and not scope.in_filter([], None)
    assert scope.in_filter(D("a"), "b") and not scope.in_filter(D("a"), "a")
    xs = {"params": {"w": [1]}, "stats": {"m": 2}}
    groups = scope.group_collections(xs, [False, True, True])
    assert groups == ({}, xs, {})
    assert groups[1]["params"] is not xs["params"]  # containers are copied


def test_get_variable_returns_the_stored_box() -> None:
    def f(s: ac.Scope) -> None:
        s.param("k", meta.with_partitioning(jax.nn.initializers.ones, ("a",)), (2,))
        assert isinstance(s.get_variable("params", "k"), meta.Partitioned)
        assert isinstance(s.get_variable("params", "k", unbox=True), jax.Array)

    ac.init(f)(jax.random.key(0))


def _boxed_body(s: ac.Scope, x: jax.Array) -> jax.Array:
    k = s.param(
        "k", meta.with_partitioning(jax.nn.initializers.ones, ("in", "out")), (x.shape[-1], 2)
    )
    return x @ k


def test_partition_name_required_by_vmap_and_scan() -> None:
    xs = jnp.ones((4, 3))

    def vmapped(s: ac.Scope, xs: jax.Array) -> jax.Array:
        return lift.vmap(_boxed_body, {"params": 0}, {"params": True}, metadata_params={})(s, xs)

    with pytest.raises(PartitioningUnspecifiedError, match=r"partition_name.*not specified"):
        ac.init(vmapped)(jax.random.key(0), xs)

    def scanned(s: ac.Scope, x: jax.Array) -> jax.Array:
        body = lambda s, c: (_boxed_body(s, c) @ jnp.ones((2, 3)), None)
        return lift.scan(body, {"params": 0}, split_rngs={"params": True}, length=2)(s, x)[0]

    with pytest.raises(PartitioningUnspecifiedError, match="partition_name"):
        ac.init(scanned)(jax.random.key(0), xs[0])

    # With the name, the box gains the axis, as Flax's does; broadcast axes need none.
    def named(s: ac.Scope, xs: jax.Array) -> jax.Array:
        params = {meta.PARTITION_NAME: "batch"}
        return lift.vmap(_boxed_body, {"params": 0}, {"params": True}, metadata_params=params)(
            s, xs
        )

    _, v = ac.init(named)(jax.random.key(0), xs)
    assert v["params"]["k"].names == ("batch", "in", "out")

    def shared(s: ac.Scope, xs: jax.Array) -> jax.Array:
        return lift.vmap(_boxed_body, {"params": None}, {"params": False})(s, xs)

    _, v = ac.init(shared)(jax.random.key(0), xs)
    assert v["params"]["k"].names == ("in", "out")


def test_while_loop_state_numbers_become_arrays() -> None:
    def f(s: ac.Scope) -> object:
        s.put_variable("state", "n", 0)

        def body(s: ac.Scope, c: object) -> object:
            s.put_variable("state", "n", s.get_variable("state", "n") + 1)
            return c + 2  # type: ignore[operator]

        cond = lambda s, c: s.get_variable("state", "n") < 3
        return lift.while_loop(cond, body, s, 0, carry_variables="state")

    c, v = ac.apply(f, mutable=True)({})
    assert int(c) == 6 and int(v["state"]["n"]) == 3


def test_flax_core_import_paths_exist() -> None:
    import importlib
    import inspect

    import flax.core

    names = [n for n in dir(flax.core) if not n.startswith("_")]
    assert [n for n in names if not hasattr(ac, n)] == []
    # Flax internals (helpers of its own transforms and of its spmd machinery) not provided.
    internal = {
        "FrozenKeysView",
        "FrozenValuesView",
        "TransformContext",
        "id_fn",
        "CountsHolder",
        "set_from_dict",
        "get_pspec",
        "map_sharding",
        "get_mesh",
        "apply_rules",
        "shard_value",
        "build_shaped_array",
        "scan",
        "CacheEntry",
        "make_padding_mask",
    }
    for mod in [
        "scope",
        "frozen_dict",
        "lift",
        "meta",
        "variables",
        "spmd",
        "tracers",
        "axes_scan",
        "partial_eval",
        "nn.linear",
        "nn.attention",
        "nn.normalization",
        "nn.stochastic",
    ]:
        ours = importlib.import_module(f"adapters.core.{mod}")
        theirs = importlib.import_module(f"flax.core.{mod}")
        defined = [
            n
            for n, o in vars(theirs).items()
            if not n.startswith("_")
            and (inspect.isfunction(o) or inspect.isclass(o))
            and o.__module__ == theirs.__name__
        ]
        missing = [n for n in defined if not hasattr(ours, n) and n not in internal]
        assert missing == [], mod
    assert hasattr(ac.lift, "scan") and hasattr(ac.axes_scan, "broadcast")


def test_unbox_constrains_under_a_mesh() -> None:
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("a",))
    box = meta.Partitioned(jnp.ones((2, 3)), ("a", None), mesh=mesh)
    value = meta.unbox({"k": box})["k"]
    assert value.sharding.spec == jax.sharding.PartitionSpec("a", None)
    assert not meta.global_mesh_defined() and meta.get_global_mesh() is None
    with jax.set_mesh(mesh):
        assert meta.global_mesh_defined()
        plain = meta.Partitioned(jnp.ones((2, 3)), ("a", None))
        assert jnp.array_equal(jax.jit(lambda b: meta.unbox(b))(plain), jnp.ones((2, 3)))


def test_tree_map_rngs_and_spmd_rules() -> None:
    from adapters.core import spmd

    keys = {"a": jax.random.key(0), "n": jnp.ones(2)}
    out = lift.tree_map_rngs(lambda k: jax.random.fold_in(k, 1) if k.ndim == 0 else k, keys)
    assert not jnp.array_equal(jax.random.key_data(out["a"]), jax.random.key_data(keys["a"]))
    rules = (("batch", "data"),)
    with spmd.logical_axis_rules(rules):
        assert tuple(spmd.get_logical_axis_rules()) == rules
    merged = spmd.composite_rules(rules, (("embed", None),))
    assert merged == (("batch", "data"), ("embed", None))
    with pytest.raises(ValueError, match="Inconsistent logical axis annotations for batch"):
        spmd.composite_rules(rules, (("batch", "model"),))
    assert spmd.from_sharding_rules(("batch", None, "x"), rules) == ("data", None, "x")
