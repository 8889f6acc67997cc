"""Scope: variables, names, rngs, mutability, validity; init/apply/bind/lazy_init."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from adapters.core import (
    DenyList,
    FrozenDict,
    Scope,
    apply,
    bind,
    init,
    lazy_init,
    nn,
)
from tests.helpers import tree_allclose


def dense(scope: Scope, x: jax.Array, features: int) -> jax.Array:
    w = scope.param("kernel", jax.nn.initializers.lecun_normal(), (x.shape[-1], features))
    b = scope.param("bias", jax.nn.initializers.zeros, (features,))
    return x @ w + b[None]


def test_param_created_at_init_and_reused_at_apply() -> None:
    x = jnp.ones((2, 3))
    y, variables = init(dense)(jax.random.key(0), x, 4)
    assert set(variables) == {"params"}
    assert variables["params"]["kernel"].shape == (3, 4)
    y2 = apply(dense)(variables, x, 4)
    np.testing.assert_allclose(y, y2)
    np.testing.assert_allclose(y, x @ variables["params"]["kernel"])


def test_init_returns_plain_dicts_and_apply_does_not_mutate_input() -> None:
    _, variables = init(dense)(jax.random.key(0), jnp.ones((1, 2)), 2)
    assert type(variables) is dict and type(variables["params"]) is dict

    def bump(scope: Scope) -> None:
        v = scope.variable("state", "n", jnp.zeros, ())
        v.value = v.value + 1

    state = {"state": {"n": jnp.zeros(())}}
    _, new = apply(bump, mutable=["state"])(state)
    assert float(state["state"]["n"]) == 0.0
    assert float(new["state"]["n"]) == 1.0


def test_same_key_same_variables_and_paths_give_different_keys() -> None:
    def model(scope: Scope, x: jax.Array) -> jax.Array:
        x = scope.child(dense, "a")(x, 3)
        return scope.child(dense, "b")(x, 3)

    x = jnp.ones((1, 3))
    _, v1 = init(model)(jax.random.key(7), x)
    _, v2 = init(model)(jax.random.key(7), x)
    _, v3 = init(model)(jax.random.key(8), x)
    assert tree_allclose(v1, v2)
    assert not np.allclose(v1["params"]["a"]["kernel"], v3["params"]["a"]["kernel"])
    assert not np.allclose(v1["params"]["a"]["kernel"], v1["params"]["b"]["kernel"])


def test_make_rng_counter_and_path_determinism() -> None:
    def draw(scope: Scope) -> tuple[jax.Array, ...]:
        a = scope.make_rng("noise")
        b = scope.make_rng("noise")
        c = scope.push("child").make_rng("noise")
        return a, b, c

    keys = {"noise": jax.random.key(0)}
    a, b, c = apply(draw)({}, rngs=keys)
    a2, b2, c2 = apply(draw)({}, rngs=keys)
    data = [jax.random.key_data(k) for k in (a, b, c, a2, b2, c2)]
    assert not np.array_equal(data[0], data[1])
    assert not np.array_equal(data[0], data[2])
    assert all(np.array_equal(x, y) for x, y in zip(data[:3], data[3:]))


def test_make_rng_falls_back_to_params_and_has_rng() -> None:
    def f(scope: Scope) -> bool:
        scope.make_rng("dropout")
        return scope.has_rng("dropout")

    assert init(f)(jax.random.key(0))[0] is False


def test_raw_uint32_keys_are_accepted() -> None:
    _y, v = init(dense)(jax.random.PRNGKey(0), jnp.ones((1, 2)), 2)
    assert v["params"]["kernel"].shape == (2, 2)


def test_variable_reference_and_get_put_has() -> None:
    def f(scope: Scope) -> tuple[bool, bool, jax.Array, jax.Array]:
        before = scope.has_variable("state", "count")
        count = scope.variable("state", "count", lambda: jnp.zeros((), jnp.int32))
        count.value = count.value + 1
        scope.put_variable("state", "other", jnp.ones(2))
        return (
            before,
            scope.has_variable("state", "count"),
            count.value,
            scope.get_variable("state", "other"),
        )

    (before, after, count, other), v = init(f)(jax.random.key(0))
    assert (before, after, int(count)) == (False, True, 1)
    np.testing.assert_allclose(other, jnp.ones(2))
    assert apply(lambda s: s.get_variable("state", "missing", 5))(v) == 5
    (_, _, count, _), v2 = apply(f, mutable=["state"])(v)
    assert int(count) == 2 and int(v2["state"]["count"]) == 2


def test_child_push_default_names_and_path() -> None:
    seen: list[tuple[str, ...]] = []

    def leaf(scope: Scope) -> None:
        seen.append(scope.path)
        scope.param("w", jax.nn.initializers.zeros, (1,))

    def model(scope: Scope) -> None:
        scope.child(leaf)()
        scope.child(leaf)()
        scope.child(leaf, prefix="block_")()
        sub = scope.push("sub")
        assert sub.path == ("sub",) and sub.path_text == "/sub" and sub.parent is scope
        assert scope.default_name("leaf_") == "leaf_2"
        sub.param("b", jax.nn.initializers.zeros, (2,))

    _, v = init(model)(jax.random.key(0))
    assert seen == [("leaf_0",), ("leaf_1",), ("block_0",)]
    assert set(v["params"]) == {"leaf_0", "leaf_1", "block_0", "sub"}


def test_child_called_twice_reuses_variables() -> None:
    def model(scope: Scope, x: jax.Array) -> jax.Array:
        layer = scope.child(dense, "shared")
        return layer(layer(x, 2), 2)

    _, v = init(model)(jax.random.key(0), jnp.ones((1, 2)))
    assert set(v["params"]) == {"shared"}


def test_reserve_allows_same_name_in_different_collections() -> None:
    def f(scope: Scope) -> None:
        scope.variable("a", "x", jnp.zeros, ())
        scope.variable("b", "x", jnp.zeros, ())
        assert scope.name_reserved("x", "a") and not scope.name_reserved("y")

    _, v = init(f)(jax.random.key(0))
    assert set(v) == {"a", "b"}


def test_reserve_requires_string_names() -> None:
    with pytest.raises(TypeError, match="must be a string"):
        init(lambda s: s.reserve(3))(jax.random.key(0))  # type: ignore[arg-type]


def test_mutable_filters_and_is_mutable_collection() -> None:
    def f(scope: Scope) -> tuple[bool, bool]:
        return scope.is_mutable_collection("params"), scope.is_mutable_collection("stats")

    assert apply(f)({}) == (False, False)
    assert apply(f, mutable=True)({})[0] == (True, True)
    assert apply(f, mutable=DenyList("params"))({})[0] == (False, True)
    assert apply(f, mutable={"stats"})({})[0] == (False, True)
    assert apply(f, mutable=("stats", "params"))({})[0] == (True, True)
    assert apply(f, mutable=pm.Not(["stats"]))({})[0] == (True, False)


def test_apply_returns_only_mutable_collections() -> None:
    def f(scope: Scope) -> None:
        scope.variable("stats", "n", jnp.zeros, ())
        scope.param("w", jax.nn.initializers.zeros, (1,))

    _, v = init(f)(jax.random.key(0))
    _, out = apply(f, mutable=["stats"])(v)
    assert set(out) == {"stats"}


def test_variables_and_mutable_variables_of_a_child() -> None:
    def f(scope: Scope) -> tuple[dict, dict]:
        child = scope.push("c")
        child.param("w", jax.nn.initializers.ones, (2,))
        child.variable("stats", "m", jnp.zeros, ())
        return child.variables(), child.mutable_variables()

    (variables, mutable), _ = init(f)(jax.random.key(0))
    assert set(variables) == {"params", "stats"}
    assert set(variables["params"]) == {"w"}
    assert set(mutable) == {"params", "stats"}


def test_rewound_resets_reservations_and_optionally_rngs() -> None:
    def f(scope: Scope) -> tuple[bool, bool]:
        a = scope.make_rng("params")
        scope.reserve("x")
        again = scope.rewound()
        again.reserve("x")  # a rewound scope has no reservations
        fresh = scope.rewound(rewind_rngs=True)
        same = np.array_equal(jax.random.key_data(fresh.make_rng("params")), jax.random.key_data(a))
        cont = np.array_equal(jax.random.key_data(again.make_rng("params")), jax.random.key_data(a))
        return same, cont

    assert init(f)(jax.random.key(0))[0] == (True, False)


def test_temporary_and_invalidate() -> None:
    scope = bind({}, rngs={"params": jax.random.key(0)}, mutable=True)
    with scope.temporary() as s:
        s.param("w", jax.nn.initializers.zeros, (1,))
    assert scope.invalid
    child = Scope({}, name=None)
    child.invalidate()
    assert child.invalid


def test_bind_is_interactive() -> None:
    scope = bind({"params": {"w": jnp.ones(2)}}, mutable=["stats"])
    np.testing.assert_allclose(scope.get_variable("params", "w"), jnp.ones(2))
    scope.put_variable("stats", "n", jnp.zeros(()))
    assert set(scope.mutable_variables()) == {"stats"}


def test_flags_and_initializing() -> None:
    def f(scope: Scope) -> tuple[bool, object]:
        return scope.get_flag("initializing", False), scope.get_flag("train", "no")

    assert init(f, flags={"train": True})(jax.random.key(0))[0] == (True, True)
    assert apply(f)({}) == (False, "no")
    with pytest.raises(KeyError, match="Flag 'x' is not set"):
        apply(lambda s: s.get_flag("x"))({})
    assert apply(lambda s: s.has_flag("x"), flags={"x": 1})({})


def test_frozen_variables_are_accepted() -> None:
    _, v = init(dense)(jax.random.key(0), jnp.ones((1, 2)), 2)
    y = apply(dense)(FrozenDict(v), jnp.ones((1, 2)), 2)
    assert y.shape == (1, 2)


def test_unbox_on_getters() -> None:
    init_fn = pm.with_partitioning(jax.nn.initializers.ones, ("in", "out"))

    def f(scope: Scope) -> tuple[object, object, object, object]:
        plain = scope.param("w", init_fn, (2, 3))
        boxed = scope.param("w2", init_fn, (2, 3), unbox=False)
        got = scope.get_variable("params", "w", unbox=True)
        got_boxed = scope.get_variable("params", "w")  # stored value, as Flax returns it
        return plain, boxed, got, got_boxed

    (plain, boxed, got, got_boxed), v = init(f)(jax.random.key(0))
    assert isinstance(plain, jax.Array) and isinstance(got, jax.Array)
    assert isinstance(boxed, pm.Partitioned) and isinstance(got_boxed, pm.Partitioned)
    assert isinstance(v["params"]["w"], pm.Partitioned)
    assert v["params"]["w"].names == ("in", "out")


def test_variable_value_assignment_keeps_the_box() -> None:
    def f(scope: Scope) -> None:
        v = scope.variable("stats", "m", pm.with_partitioning(jnp.zeros, ("x",)), (3,))
        assert isinstance(v.value, jax.Array)
        v.value = v.value + 1
        raw = scope.variable("stats", "m2", jnp.zeros, (3,), unbox=False)
        raw.value = raw.value + 2
        assert v.is_mutable()
        assert "stats" in repr(v)

    _, v = init(f)(jax.random.key(0))
    assert isinstance(v["stats"]["m"], pm.Partitioned)
    np.testing.assert_allclose(v["stats"]["m"].value, jnp.ones(3))


def test_scope_equality_is_cursor_equality() -> None:
    scope = bind({}, mutable=True)
    child = scope.push("a")
    assert child == child.rewound() and hash(child) == hash(child.rewound())
    assert child != scope and child != "a"
    assert repr(child) == "Scope('/a')"


def test_push_reuse_continues_rng_counters() -> None:
    def f(scope: Scope) -> bool:
        a = scope.push("c").make_rng("params")
        b = scope.push("c", reuse=True).make_rng("params")
        return np.array_equal(jax.random.key_data(a), jax.random.key_data(b))

    assert init(f)(jax.random.key(0))[0] is False


def test_lazy_init_does_not_need_input_values() -> None:
    def f(scope: Scope, x: jax.Array) -> jax.Array:
        return nn.dense(scope, x, 5)

    v = lazy_init(f)(jax.random.key(0), jax.ShapeDtypeStruct((8, 3), jnp.float32))
    _, ref = init(f)(jax.random.key(0), jnp.zeros((8, 3)))
    assert tree_allclose(v, ref)


def test_lazy_init_without_shapes_is_init() -> None:
    v = lazy_init(dense)(jax.random.key(0), jnp.ones((1, 2)), 3)
    assert v["params"]["kernel"].shape == (2, 3)


def test_param_shape_check_cache_does_not_keep_initializers_alive() -> None:
    import gc
    import weakref

    big = jnp.ones((64, 64))

    def make() -> tuple[object, weakref.ref]:
        init_fn = lambda key, shape: big[: shape[0], : shape[1]]
        return init_fn, weakref.ref(init_fn)

    init_fn, ref = make()
    holder = [init_fn]
    del init_fn

    def f(scope: Scope) -> jax.Array:
        return scope.param("w", holder[0], (2, 2))  # type: ignore[arg-type]

    _, v = init(f)(jax.random.key(0))
    apply(f)(v)  # the shape check runs (and caches) here
    holder.clear()
    gc.collect()
    assert ref() is None


def test_param_shape_check_traces_the_initializer_once_for_list_shapes() -> None:
    # apply checks a stored param's shape against its initializer's (abstractly); the
    # result is cached per initializer and arguments, lists included (Linen's norms pass
    # their shapes as lists).
    calls = []

    def counting_init(key: jax.Array, shape: list[int]) -> jax.Array:
        calls.append(shape)
        return jnp.zeros(shape)

    def f(scope: Scope) -> jax.Array:
        return scope.param("w", counting_init, [3])

    _, variables = init(f)(jax.random.key(0))
    for _ in range(3):
        apply(f)(variables)
    assert len(calls) == 2  # the real init, then one abstract trace for all the applies
