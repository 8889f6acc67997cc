"""``lift.pack``: the six stages of the lifting note, and the note's ``lift_transpose``."""

from typing import Any

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random

import pytreemod as pm
from adapters.core import DenyList, LazyRng, Scope, apply, init, lift
from adapters.core import nn as core_nn
from adapters.core.errors import ModifyScopeVariableError, UnliftedCollectionError


def lift_transpose(fn, target="params", variables=True, rngs=True):  # type: ignore[no-untyped-def]
    # The design note's example, as written (imports changed to adapters.core).
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, *args):  # type: ignore[no-untyped-def]
        target, rest = variable_groups

        def trans(x):  # type: ignore[no-untyped-def]
            if x.ndim == 2:
                return x.T
            return x

        target = jax.tree_util.tree_map(trans, target)
        variable_groups = (target, rest)
        scope = scope_fn(variable_groups, rng_groups)
        y = fn(scope, *args)
        out_variables = repack_fn(scope)
        return y, out_variables

    return lift.pack(
        wrapper,
        in_variable_filters=(target, variables),
        out_variable_filters=(variables,),
        rng_filters=(rngs,),
    )


def test_lift_transpose_example_as_written() -> None:
    x = jnp.ones((3, 2))
    y, params = init(lift_transpose(core_nn.dense))(random.key(0), x, 4)
    assert y.shape == (3, 4)
    assert params["params"]["kernel"].shape == (2, 4)
    # Applied to a kernel stored transposed, the body sees it the right way round.
    kernel = random.normal(random.key(1), (4, 2))
    variables = {"params": {"kernel": kernel, "bias": jnp.zeros(4)}}
    y = apply(lift_transpose(core_nn.dense))(variables, x, 4)
    np.testing.assert_allclose(y, x @ kernel.T, rtol=1e-6)


def recorder(seen: dict[str, Any], body: Any = None) -> Any:
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, *args):  # type: ignore[no-untyped-def]
        seen["variable_groups"] = variable_groups
        seen["rng_groups"] = rng_groups
        scopes = scope_fn(variable_groups, rng_groups)
        seen["scopes"] = scopes
        y = body(scopes, *args) if body is not None else None
        out = repack_fn(scopes)
        seen["out"] = out
        return y, out

    return wrapper


def make_vars() -> dict[str, Any]:
    return {
        "params": {"w": jnp.ones(2), "child": {"v": jnp.zeros(3)}},
        "batch_stats": {"m": jnp.zeros(2)},
        "cache": {"c": jnp.ones(1)},
    }


def test_filter_stage_first_match_wins_and_unmatched_are_dropped() -> None:
    seen: dict[str, Any] = {}
    packed = lift.pack(recorder(seen), (["params"], True), (True,), (True,))
    apply(packed)(make_vars())
    (params_group,), (rest_group,) = seen["variable_groups"]
    assert set(params_group) == {"params"}
    assert set(rest_group) == {"batch_stats", "cache"}

    seen.clear()
    packed = lift.pack(recorder(seen), (DenyList("cache"), "cache"), (True,), (True,))
    apply(packed)(make_vars())
    (a,), (b,) = seen["variable_groups"]
    assert set(a) == {"params", "batch_stats"} and set(b) == {"cache"}

    seen.clear()
    packed = lift.pack(recorder(seen), ("batch_stats",), (True,), (True,))
    apply(packed)(make_vars())
    ((only,),) = seen["variable_groups"]
    assert set(only) == {"batch_stats"}


def test_unmatched_collections_are_unavailable_inside() -> None:
    def body(scope: Scope) -> None:
        scope.variable("cache", "c")

    packed = lift.pack(recorder({}, body), ("params",), (True,), (True,), name="mine")
    with pytest.raises(UnliftedCollectionError, match=r'"cache" is not lifted into .*"mine"'):
        apply(packed)(make_vars())


def test_rngs_are_passed_through_and_grouped() -> None:
    seen: dict[str, Any] = {}
    drawn: list[Any] = []

    def draw(scope: Any, *_: Any) -> None:
        drawn.append(random.key_data(scope.make_rng("dropout")))

    def f(scope: Scope) -> None:
        child = scope.push("c")
        lift.pack(recorder(seen, draw), (True,), (True,), (["dropout"], True))(child)
        draw(child)  # the counter inside was the child's own: this is its second key

    def ref(scope: Scope) -> None:
        child = scope.push("c")
        draw(child)
        draw(child)

    rngs = {"params": random.key(0), "dropout": random.key(1), "noise": random.key(2)}
    apply(f)({}, rngs=rngs)
    ((drop,), (rest,)) = seen["rng_groups"]
    assert set(drop) == {"dropout"} and set(rest) == {"params", "noise"}
    # The caller's stream itself (a LazyRng with the child's path), not a fresh key.
    assert isinstance(drop["dropout"], LazyRng) and drop["dropout"].suffix == ("c",)
    lifted = list(drawn)
    drawn.clear()
    apply(ref)({}, rngs=rngs)
    assert len(lifted) == 2 and all(np.array_equal(a, b) for a, b in zip(lifted, drawn))
    assert not np.array_equal(drawn[0], drawn[1])


def test_scope_dedup_reconstructs_children_from_their_root() -> None:
    seen: dict[str, Any] = {}

    def body(scopes: tuple[Scope, Scope]) -> None:
        _parent, child = scopes
        assert child.parent is not None and child.path == ("c",)
        child.put_variable("params", "w", jnp.full((2,), 5.0))

    def f(scope: Scope) -> None:
        child = scope.push("c")
        lift.pack(recorder(seen, body), (True,), (True,), (True,))((scope, child))

    _, v = init(f)(random.key(0))
    # One root lifted: each group holds one dict.
    assert all(len(group) == 1 for group in seen["variable_groups"])
    np.testing.assert_allclose(v["params"]["c"]["w"], 5.0)


def test_repack_ignores_immutable_state_and_commit_writes_back() -> None:
    seen: dict[str, Any] = {}

    def body(scope: Scope) -> None:
        stats = scope.variable("batch_stats", "m")
        stats.value = stats.value + 1
        assert not scope.is_mutable_collection("params")

    packed = lift.pack(recorder(seen, body), (True,), (True,), (True,))
    _, new = apply(packed, mutable=["batch_stats"])(make_vars())
    ((out,),) = seen["out"]
    assert set(out) == {"batch_stats"}
    np.testing.assert_allclose(new["batch_stats"]["m"], jnp.ones(2))


def test_scope_fn_mutable_filter_restricts_writes() -> None:
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups):  # type: ignore[no-untyped-def]
        scope = scope_fn(variable_groups, rng_groups, mutable_filter=DenyList("batch_stats"))
        scope.put_variable("batch_stats", "m", jnp.ones(2))
        return None, repack_fn(scope)

    with pytest.raises(ModifyScopeVariableError, match='"batch_stats" is immutable'):
        apply(lift.pack(wrapper, (True,), (True,), (True,)), mutable=True)(make_vars())


def test_commit_skips_collections_immutable_outside() -> None:
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups):  # type: ignore[no-untyped-def]
        scope_fn(variable_groups, rng_groups)
        # A transform returning more than it may (e.g. scan's redundant groups).
        return None, ((dict(params={"w": jnp.zeros(2)}),),)

    _, new = apply(lift.pack(wrapper, (True,), (True,), (True,)), mutable=["cache"])(make_vars())
    assert new == {"cache": make_vars()["cache"]}


def test_python_scalars_become_arrays_inside() -> None:
    seen: dict[str, Any] = {}

    def f(scope: Scope) -> None:
        scope.variable("state", "n", lambda: 0)
        lift.pack(recorder(seen), (True,), (True,), (True,))(scope)

    init(f)(random.key(0))
    ((group,),) = seen["variable_groups"]
    assert isinstance(group["state"]["n"], jax.Array)


def test_keyword_arguments_warn_unless_enabled() -> None:
    def wrapper(scope_fn, repack_fn, variable_groups, rng_groups, **kwargs):  # type: ignore[no-untyped-def]
        scope = scope_fn(variable_groups, rng_groups)
        return kwargs, repack_fn(scope)

    packed = lift.pack(wrapper, (True,), (True,), (True,), name="kw")
    with pytest.warns(RuntimeWarning, match="kw does not take keyword arguments; a ignored"):
        assert apply(packed)({}, a=1) == {}
    enabled = lift.pack(wrapper, (True,), (True,), (True,), enable_kwargs=True)
    assert apply(enabled)({}, a=1) == {"a": 1}


def test_debug_path_names_the_transform() -> None:
    seen: dict[str, Any] = {}

    def f(scope: Scope) -> None:
        child = scope.push("block")
        lift.pack(recorder(seen), (True,), (True,), (True,), name="vmap")(child)

    init(f)(random.key(0))
    assert seen["scopes"].path_text == "/vmap(block)"
    assert seen["scopes"].path == ("block",)


def test_boxes_pass_through_pack() -> None:
    v = {"params": {"w": pm.Partitioned(jnp.ones((2, 3)), ("a", "b"))}}
    seen: dict[str, Any] = {}
    apply(lift.pack(recorder(seen), (True,), (True,), (True,)))(v)
    ((group,),) = seen["variable_groups"]
    assert isinstance(group["params"]["w"], pm.Partitioned)
