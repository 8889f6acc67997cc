"""Every lifted transform, checked against the same computation written by hand with plain
JAX on the variables dict."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, random

import pytreemod as pm
from adapters.core import Scope, apply, init, lift, nn
from tests.helpers import tree_allclose

KEY = random.key(0)


def dense(scope: Scope, x: jax.Array, features: int) -> jax.Array:
    return nn.dense(scope, x, features)


def hand_dense(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return x @ p["kernel"] + jnp.reshape(p["bias"], (1,) * (x.ndim - 1) + (-1,))


# ----------------------------------------------------------------------------- vmap


def test_vmap_mapped_params_matches_jax_vmap() -> None:
    f = lift.vmap(
        dense, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=(0, None)
    )
    xs = random.normal(random.key(1), (3, 5, 2))
    y, v = init(f)(KEY, xs, 4)
    assert v["params"]["kernel"].shape == (3, 2, 4)
    # Split rngs: each index initialized differently.
    k = v["params"]["kernel"]
    assert not np.allclose(k[0], k[1])
    expected = jax.vmap(hand_dense)(v["params"], xs)
    np.testing.assert_allclose(y, expected, rtol=1e-5)
    np.testing.assert_allclose(apply(f)(v, xs, 4), expected, rtol=1e-5)


def test_vmap_shared_params_matches_jax_vmap() -> None:
    f = lift.vmap(
        dense, variable_axes={"params": None}, split_rngs={"params": False}, in_axes=(0, None)
    )
    xs = random.normal(random.key(1), (3, 5, 2))
    _y, v = init(f)(KEY, xs, 4)
    assert v["params"]["kernel"].shape == (2, 4)
    expected = jax.vmap(hand_dense, in_axes=(None, 0))(v["params"], xs)
    np.testing.assert_allclose(apply(f)(v, xs, 4), expected, rtol=1e-5)


def test_vmap_unsplit_rng_gives_identical_copies() -> None:
    f = lift.vmap(
        dense, variable_axes={"params": 0}, split_rngs={"params": False}, in_axes=(0, None)
    )
    _, v = init(f)(KEY, jnp.ones((3, 1, 2)), 4)
    k = v["params"]["kernel"]
    np.testing.assert_allclose(k[0], k[2])


def test_vmap_mutable_batch_stats_matches_hand_written() -> None:
    def body(scope: Scope, x: jax.Array) -> jax.Array:
        stats = scope.variable("batch_stats", "mean", jnp.zeros, x.shape[-1:])
        stats.value = 0.5 * stats.value + 0.5 * x.mean(0)
        return x - stats.value[None]

    f = lift.vmap(body, variable_axes={"batch_stats": 0}, split_rngs={}, in_axes=0)
    xs = random.normal(random.key(2), (3, 4, 2))
    _, v = init(f)(KEY, xs)
    y, new = apply(f, mutable=["batch_stats"])(v, xs)

    def hand(mean: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        m = 0.5 * mean + 0.5 * x.mean(0)
        return x - m[None], m

    ey, em = jax.vmap(hand)(v["batch_stats"]["mean"], xs)
    np.testing.assert_allclose(y, ey, rtol=1e-6)
    np.testing.assert_allclose(new["batch_stats"]["mean"], em, rtol=1e-6)


def test_vmap_out_axes_axis_size_and_axis_name() -> None:
    def body(scope: Scope, x: jax.Array) -> jax.Array:
        w = scope.param("w", jax.nn.initializers.normal(), (x.shape[-1],))
        return lax.psum(x * w[None], "heads")

    f = lift.vmap(
        body,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=1,
        axis_size=3,
        axis_name="heads",
    )
    x = random.normal(random.key(3), (2, 4))
    y, v = init(f)(KEY, x)
    assert y.shape == (2, 3, 4)
    expected = jnp.sum(v["params"]["w"][None] * x[:, None], axis=1, keepdims=True)
    np.testing.assert_allclose(y, jnp.broadcast_to(expected, (2, 3, 4)), rtol=1e-5)


def test_vmap_in_out_only_axes() -> None:
    def body(scope: Scope, x: jax.Array) -> jax.Array:
        v = scope.variable("state", "s", jnp.zeros, ())
        v.value = x.sum()
        return x

    f = lift.vmap(body, variable_axes={"state": lift.Out(0)}, split_rngs={}, in_axes=0)
    _, v = init(f)(KEY, jnp.arange(6.0).reshape(3, 2))
    np.testing.assert_allclose(v["state"]["s"], jnp.array([1.0, 5.0, 9.0]))


def test_vmap_metadata_params_add_and_remove_axis() -> None:
    seen: list[Any] = []

    def body(scope: Scope, x: jax.Array) -> jax.Array:
        init_fn = pm.with_partitioning(jax.nn.initializers.ones, ("in", "out"))
        k = scope.param("kernel", init_fn, (x.shape[-1], 2))
        seen.append(scope.get_variable("params", "kernel", unbox=False))
        return x @ k

    f = lift.vmap(
        body,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=0,
        metadata_params={pm.PARTITION_NAME: "heads"},
    )
    xs = jnp.ones((3, 1, 2))
    _, v = init(f)(KEY, xs)
    assert v["params"]["kernel"].names == ("heads", "in", "out")
    assert v["params"]["kernel"].value.shape == (3, 2, 2)
    seen.clear()
    apply(f)(v, xs)
    assert seen[0].names == ("in", "out")


def test_vmap_box_changes_its_value_outside_the_mapping() -> None:
    # As in Flax, remove_axis sees the stacked value before the vmap and add_axis the
    # stacked output after it: a box may store a reduced value and broadcast it back.
    class Mean(pm.AxisMetadata):
        def unbox(self) -> Any:
            return self.value

        def add_axis(self, index: int, params: Any) -> "Mean":
            return self.replace(value=jnp.mean(self.value, axis=index))

        def remove_axis(self, index: int, params: Any) -> "Mean":
            shape = list(self.value.shape)
            shape.insert(index, params["size"])
            return self.replace(value=jnp.broadcast_to(self.value, shape))

    seen: list[tuple[int, ...]] = []

    def body(scope: Scope, x: jax.Array) -> jax.Array:
        v = scope.variable("aux", "v", lambda: Mean(jnp.ones(())), unbox=False)
        seen.append(v.value.value.shape)
        return x

    f = lift.vmap(body, variable_axes={"aux": 0}, split_rngs={}, metadata_params={"size": 2})
    _, v = init(f)(KEY, jnp.ones((2, 5)))
    assert v["aux"]["v"].value.shape == ()
    apply(f)(v, jnp.ones((2, 5)))
    assert seen == [(), ()]


# ----------------------------------------------------------------------------- scan


def test_scan_over_params_matches_lax_scan() -> None:
    def body(scope: Scope, c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        c = jnp.tanh(nn.dense(scope, c, c.shape[-1]) + x)
        return c, c.sum()

    f = lift.scan(body, variable_axes={"params": 0}, split_rngs={"params": True})
    c0 = jnp.ones((2, 3))
    xs = random.normal(random.key(1), (4, 2, 3))
    (c, ys), v = init(f)(KEY, c0, xs)
    assert v["params"]["kernel"].shape == (4, 3, 3)

    def hand(c: jax.Array, px: Any) -> tuple[jax.Array, jax.Array]:
        p, x = px
        c = jnp.tanh(hand_dense(p, c) + x)
        return c, c.sum()

    ec, eys = lax.scan(hand, c0, (v["params"], xs))
    (c2, ys2) = apply(f)(v, c0, xs)
    for got in ((c, ys), (c2, ys2)):
        np.testing.assert_allclose(got[0], ec, rtol=1e-5)
        np.testing.assert_allclose(got[1], eys, rtol=1e-5)


def test_scan_broadcast_params_created_once() -> None:
    def cell(scope: Scope, c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        c = jnp.tanh(scope.child(dense, "h")(c, 3) + scope.child(dense, "i")(x, 3))
        return c, c

    f = lift.scan(cell, variable_broadcast="params", split_rngs={"params": False})
    c0 = jnp.zeros((2, 3))
    xs = random.normal(random.key(1), (5, 2, 4))
    (c, ys), v = init(f)(KEY, c0, xs)
    assert v["params"]["h"]["kernel"].shape == (3, 3)
    assert v["params"]["i"]["kernel"].shape == (4, 3)

    def hand(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        c = jnp.tanh(hand_dense(v["params"]["h"], c) + hand_dense(v["params"]["i"], x))
        return c, c

    ec, eys = lax.scan(hand, c0, xs)
    np.testing.assert_allclose(c, ec, rtol=1e-5)
    np.testing.assert_allclose(ys, eys, rtol=1e-5)
    _c2, ys2 = apply(f)(v, c0, xs)
    np.testing.assert_allclose(ys2, eys, rtol=1e-5)


def test_scan_carry_variables_and_broadcast_inputs() -> None:
    def body(scope: Scope, c: jax.Array, x: jax.Array, bias: jax.Array) -> Any:
        n = scope.variable("counter", "n")
        n.value = n.value + 1
        return c + x + bias, n.value

    def f(scope: Scope, xs: jax.Array, bias: jax.Array) -> Any:
        scope.variable("counter", "n", lambda: jnp.zeros((), jnp.int32))
        return lift.scan(body, variable_carry="counter", in_axes=(0, lift.broadcast))(
            scope, jnp.zeros(2), xs, bias
        )

    xs = jnp.arange(8.0).reshape(4, 2)
    bias = jnp.ones(2)
    (c, ns), v = init(f)(KEY, xs, bias)
    np.testing.assert_allclose(c, xs.sum(0) + 4 * bias)
    np.testing.assert_array_equal(ns, jnp.arange(1, 5))
    assert int(v["counter"]["n"]) == 4
    (_, ns2), v2 = apply(f, mutable=["counter"])(v, xs, bias)
    np.testing.assert_array_equal(ns2, jnp.arange(5, 9))
    assert int(v2["counter"]["n"]) == 8

    # Immutable carried collection: read-only inside, passes through unchanged.
    def read(scope: Scope, c: jax.Array, x: jax.Array) -> Any:
        return c + scope.get_variable("counter", "n"), x

    g = lift.scan(read, variable_carry="counter")
    (c3, _) = apply(g)(v, jnp.zeros((), jnp.int32), jnp.arange(3))
    assert int(c3) == 12


def test_scan_reverse_length_unroll_out_axes() -> None:
    def body(scope: Scope, c: jax.Array) -> Any:
        return c + 1, jnp.stack([c, c])

    f = lift.scan(body, length=3, reverse=True, unroll=2, in_axes=(), out_axes=1)
    (c, ys), _ = init(f)(KEY, jnp.zeros(()))
    ec, eys = lax.scan(
        lambda c, _: (c + 1, jnp.stack([c, c])), jnp.zeros(()), None, length=3, reverse=True
    )
    np.testing.assert_allclose(c, ec)
    np.testing.assert_allclose(ys, jnp.moveaxis(eys, 0, 1))


def test_scan_metadata_params() -> None:
    def body(scope: Scope, c: jax.Array, _: Any) -> Any:
        w = scope.param("w", pm.with_partitioning(jax.nn.initializers.ones, ("embed",)), c.shape)
        assert isinstance(scope.get_variable("params", "w", unbox=False), pm.Partitioned)
        return c * w, None

    f = lift.scan(
        body,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        metadata_params={pm.PARTITION_NAME: "layers"},
        length=3,
    )
    _, v = init(f)(KEY, jnp.ones(2), None)
    assert v["params"]["w"].names == ("layers", "embed")
    assert v["params"]["w"].value.shape == (3, 2)
    (c, _) = apply(f)(v, jnp.ones(2), None)
    np.testing.assert_allclose(c, jnp.ones(2))


def test_scan_check_constancy_invariants_traces_the_body_twice() -> None:
    for check, expected in ((True, 2), (False, 1)):
        traces: list[int] = []

        def body(
            scope: Scope, c: jax.Array, x: jax.Array, traces: list[int] = traces
        ) -> tuple[jax.Array, jax.Array]:
            traces.append(1)
            return c + x, x

        f = lift.scan(body, check_constancy_invariants=check)
        (c, ys), _ = init(f)(KEY, jnp.zeros(()), jnp.arange(3.0))
        assert len(traces) == expected
        assert float(c) == 3.0 and ys.shape == (3,)


def test_scan_split_rngs_differ_per_iteration() -> None:
    def body(scope: Scope, c: Any, _: Any) -> Any:
        return c, random.uniform(scope.make_rng("noise"), ())

    for split, distinct in ((True, 3), (False, 1)):
        f = lift.scan(body, split_rngs={"noise": split}, length=3)
        (_, ys), _ = init(f)({"params": KEY, "noise": random.key(5)}, (), None)
        assert len(set(np.asarray(ys).tolist())) == distinct


def test_scan_data_transform() -> None:
    calls: list[int] = []

    def transform(groups: Any, rngs: Any) -> Any:
        calls.append(1)
        return groups, rngs

    def body(scope: Scope, c: jax.Array, x: jax.Array) -> Any:
        return c + x, ()

    f = lift.scan(body, data_transform=transform)
    (c, _), _ = init(f)(KEY, jnp.zeros(()), jnp.arange(3.0))
    assert float(c) == 3.0 and calls


# ----------------------------------------------------------------------------- remat


def mlp(scope: Scope, x: jax.Array, depth: int = 2) -> jax.Array:
    for i in range(depth):
        x = jnp.tanh(scope.child(dense, f"l{i}")(x, 3))
    return x


def hand_mlp(v: dict[str, Any], x: jax.Array, depth: int = 2) -> jax.Array:
    for i in range(depth):
        x = jnp.tanh(hand_dense(v["params"][f"l{i}"], x))
    return x


def test_remat_matches_plain_function_and_its_gradients() -> None:
    f = lift.remat(mlp)
    x = random.normal(random.key(1), (2, 3))
    _y, v = init(f)(KEY, x)
    _, ref = init(mlp)(KEY, x)
    assert jax.tree.structure(v) == jax.tree.structure(ref)

    def loss(fn: Any, v: Any) -> jax.Array:
        return apply(fn)(v, x).sum()

    g = jax.grad(lambda v: loss(f, v))(v)
    g_ref = jax.grad(lambda v: jnp.sum(hand_mlp(v, x)))(v)
    assert tree_allclose(g, g_ref)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda v: loss(f, v)))(v))
    assert "checkpoint" in jaxpr or "remat" in jaxpr


def test_remat_static_argnums_and_policy() -> None:
    def body(scope: Scope, x: jax.Array, depth: int) -> jax.Array:
        if depth > 1:  # Python control flow on a static argument
            x = x * 2
        return mlp(scope, x, depth)

    f = lift.remat(
        body,
        static_argnums=(1,),
        policy=jax.checkpoint_policies.nothing_saveable,
        prevent_cse=False,
    )
    x = jnp.ones((1, 3))
    y, v = init(f)(KEY, x, 2)
    np.testing.assert_allclose(y, hand_mlp(v, x * 2, 2), rtol=1e-6)


def test_remat_traces_python_numbers_unless_static() -> None:
    kinds: list[bool] = []

    def body(scope: Scope, x: jax.Array, flag: bool) -> jax.Array:
        kinds.append(isinstance(flag, jax.Array))
        return x

    init(lift.remat(body))(KEY, jnp.ones(2), True)
    init(lift.remat(body, static_argnums=(1,)))(KEY, jnp.ones(2), True)
    assert kinds == [True, False]


def test_remat_scan_matches_unrolled_loop() -> None:
    def body(scope: Scope, x: jax.Array) -> jax.Array:
        return x + jnp.tanh(nn.dense(scope, x, x.shape[-1]))

    f = lift.remat_scan(body, lengths=(2, 3))
    x = random.normal(random.key(1), (2, 4))
    y, v = init(f)(KEY, x)
    k, b = v["params"]["kernel"], v["params"]["bias"]
    assert k.shape == (2, 3, 4, 4)
    h = x
    for i in range(2):
        for j in range(3):
            h = h + jnp.tanh(h @ k[i, j] + b[i, j][None])
    np.testing.assert_allclose(y, h, rtol=1e-5)
    np.testing.assert_allclose(apply(f)(v, x), h, rtol=1e-5)
    g = jax.grad(lambda v: apply(f)(v, x).sum())(v)
    assert g["params"]["kernel"].shape == k.shape
    one = lift.remat_scan(body, lengths=(3,))
    _, v1 = init(one)(KEY, x)
    assert v1["params"]["kernel"].shape == (3, 4, 4)


# ----------------------------------------------------------------------------- jit


def test_jit_matches_and_compiles_once() -> None:
    traces: list[int] = []

    def body(scope: Scope, x: jax.Array) -> jax.Array:
        traces.append(1)
        stats = scope.variable("stats", "n", jnp.zeros, ())
        stats.value = stats.value + 1
        return mlp(scope, x)

    f = lift.jit(body)
    x = random.normal(random.key(1), (2, 3))
    y, v = init(f)(KEY, x)
    np.testing.assert_allclose(y, hand_mlp(v, x), rtol=1e-6)
    n_init = len(traces)
    y2 = y
    for _ in range(3):
        y2, updates = apply(f, mutable=["stats"])(v, x)
        v = {**v, **updates}
    assert len(traces) == n_init + 1  # one trace for the apply configuration
    assert float(v["stats"]["n"]) == 4.0
    np.testing.assert_allclose(y2, hand_mlp(v, x), rtol=1e-6)


def test_jit_cache_does_not_depend_on_the_scope_path() -> None:
    traces: list[int] = []

    def body(scope: Scope, x: jax.Array) -> jax.Array:
        traces.append(1)
        return nn.dense(scope, x, 2)

    f = lift.jit(body)

    def net(scope: Scope, x: jax.Array) -> jax.Array:
        return f(scope.push("a"), x) + f(scope.push("b"), x)

    x = jnp.ones((1, 3))
    _, v = init(net)(KEY, x)
    assert len(traces) == 1  # one trace serves both paths
    ref = sum(x @ v["params"][n]["kernel"] + v["params"][n]["bias"][None] for n in ("a", "b"))
    np.testing.assert_allclose(apply(net)(v, x), ref, rtol=1e-6)


def test_jit_draws_the_keys_of_the_plain_function() -> None:
    # The caller's counters are shared: a second call draws the next key, not the first
    # one again (the counters are part of the compilation key).
    def body(scope: Scope) -> jax.Array:
        return random.normal(scope.make_rng("noise"), ())

    f = lift.jit(body)
    rngs = {"params": KEY, "noise": random.key(1)}
    jitted = apply(lambda scope: (f(scope), f(scope)))({}, rngs=rngs)
    plain = apply(lambda scope: (body(scope), body(scope)))({}, rngs=rngs)
    assert float(jitted[0]) != float(jitted[1])
    np.testing.assert_array_equal(jitted, plain)


def test_jit_static_argnums_and_donate() -> None:
    def body(scope: Scope, x: jax.Array, depth: int) -> jax.Array:
        return mlp(scope, x, depth)

    f = lift.jit(body, static_argnums=(2,), donate_argnums=())
    x = jnp.ones((1, 3))
    _y, v = init(f)(KEY, x, 3)
    assert set(v["params"]) == {"l0", "l1", "l2"}
    np.testing.assert_allclose(apply(f)(v, x, 3), hand_mlp(v, x, 3), rtol=1e-6)


# ----------------------------------------------------------------------------- autodiff


def scale(scope: Scope, x: jax.Array) -> jax.Array:
    p = scope.param("scale", jax.nn.initializers.constant(2.0), ())
    return p * jnp.sin(x)


def test_jvp_matches_jax_jvp() -> None:
    x = jnp.arange(3.0)
    _, v = init(scale)(KEY, x)

    def f(scope: Scope, x: jax.Array) -> Any:
        return lift.jvp(
            scale,
            scope,
            (x,),
            (jnp.ones_like(x),),
            variable_tangents={"params": {"scale": jnp.ones(())}},
        )

    y, t = apply(f)(v, x)
    hand = lambda p, x: p["scale"] * jnp.sin(x)
    ey, et = jax.jvp(hand, (v["params"], x), ({"scale": jnp.ones(())}, jnp.ones_like(x)))
    np.testing.assert_allclose(y, ey)
    np.testing.assert_allclose(t, et, rtol=1e-6)


def test_vjp_matches_jax_vjp() -> None:
    x = jnp.arange(3.0)
    _, v = init(scale)(KEY, x)

    def f(scope: Scope, x: jax.Array) -> Any:
        y, bwd = lift.vjp(scale, scope, x)
        params_t, x_t = bwd(jnp.ones_like(y))
        return y, params_t, x_t

    _y, params_t, x_t = apply(f)(v, x)
    hand = lambda p, x: p["scale"] * jnp.sin(x)
    _, bwd = jax.vjp(hand, v["params"], x)
    ep, ex = bwd(jnp.ones(3))
    np.testing.assert_allclose(params_t["params"]["scale"], ep["scale"], rtol=1e-6)
    np.testing.assert_allclose(x_t, ex, rtol=1e-6)

    def g(scope: Scope, x: jax.Array) -> Any:
        _y, _bwd, aux = lift.vjp(lambda s, x: (scale(s, x), "aux"), scope, x, has_aux=True)
        return aux

    assert apply(g)(v, x) == "aux"


def test_value_and_grad_matches_jax() -> None:
    x = jnp.arange(3.0)
    _, v = init(scale)(KEY, x)

    def f(scope: Scope, x: jax.Array) -> Any:
        return lift.value_and_grad(lambda s, x: scale(s, x).sum(), scope, x)

    y, (gx,) = apply(f)(v, x)
    ey, egx = jax.value_and_grad(lambda x: (2.0 * jnp.sin(x)).sum())(x)
    np.testing.assert_allclose(y, ey, rtol=1e-6)
    np.testing.assert_allclose(gx, egx, rtol=1e-6)

    def g(scope: Scope, x: jax.Array) -> Any:
        return lift.value_and_grad(lambda s, x: (scale(s, x).sum(), 7), scope, x, has_aux=True)

    _, aux, _ = apply(g)(v, x)
    assert aux == 7


def test_custom_vjp_sign_gradient() -> None:
    def fwd(scope: Scope, x: jax.Array) -> Any:
        y, vjp_fn = lift.vjp(dense_2, scope, x)
        return y, vjp_fn

    def bwd(vjp_fn: Any, y_t: jax.Array) -> Any:
        params_t, *inputs_t = vjp_fn(y_t)
        return (jax.tree.map(jnp.sign, params_t), *inputs_t)

    sign_dense = lift.custom_vjp(dense_2, forward_fn=fwd, backward_fn=bwd)
    x = random.normal(random.key(1), (4, 3))
    y, v = init(sign_dense)(KEY, x)
    np.testing.assert_allclose(y, hand_dense(v["params"], x), rtol=1e-6)
    g = jax.grad(lambda v: apply(sign_dense)(v, x).sum())(v)
    g_ref = jax.grad(lambda p: hand_dense(p, x).sum())(v["params"])
    assert tree_allclose(g["params"], jax.tree.map(jnp.sign, g_ref))


def dense_2(scope: Scope, x: jax.Array) -> jax.Array:
    return nn.dense(scope, x, 2)


# ----------------------------------------------------------------------------- control flow


def test_while_loop_matches_lax_while_loop() -> None:
    def cond_fn(scope: Scope, c: jax.Array) -> jax.Array:
        return scope.get_variable("state", "acc") < 10

    def body_fn(scope: Scope, c: jax.Array) -> jax.Array:
        acc = scope.variable("state", "acc")
        acc.value = acc.value + 1
        return c * scope.get_variable("params", "w")

    def f(scope: Scope, x: jax.Array) -> jax.Array:
        scope.variable("state", "acc", lambda: jnp.zeros((), jnp.int32))
        scope.param("w", jax.nn.initializers.constant(1.5), ())
        return lift.while_loop(cond_fn, body_fn, scope, x, carry_variables="state")

    y, v = init(f)(KEY, jnp.ones(2))
    w = v["params"]["w"]
    ey, eacc = lax.while_loop(
        lambda s: s[1] < 10, lambda s: (s[0] * w, s[1] + 1), (jnp.ones(2), jnp.zeros((), jnp.int32))
    )
    np.testing.assert_allclose(y, ey, rtol=1e-6)
    assert int(v["state"]["acc"]) == int(eacc) == 10


def test_while_loop_split_rngs() -> None:
    def body_fn(scope: Scope, c: Any) -> Any:
        i, total = c
        return i + 1, total + random.uniform(scope.make_rng("noise"), ())

    def f(scope: Scope) -> Any:
        return lift.while_loop(
            lambda s, c: c[0] < 3,
            body_fn,
            scope,
            (jnp.zeros((), jnp.int32), jnp.zeros(())),
            split_rngs={"noise": True},
        )

    (_, total), _ = init(f)({"params": KEY, "noise": random.key(3)})
    assert 0.0 < float(total) < 3.0


def test_cond_matches_branches_and_updates_state() -> None:
    def true_fn(scope: Scope, x: jax.Array) -> jax.Array:
        scope.variable("state", "true_count").value += 1
        return scope.child(dense, "d")(x, 2)

    def false_fn(scope: Scope, x: jax.Array) -> jax.Array:
        scope.variable("state", "false_count").value += 1
        return -scope.child(dense, "d")(x, 2)

    def f(scope: Scope, x: jax.Array, pred: jax.Array) -> jax.Array:
        scope.variable("state", "true_count", lambda: 0)
        scope.variable("state", "false_count", lambda: 0)
        return lift.cond(pred, true_fn, false_fn, scope, x)

    x = jnp.ones((1, 3))
    y, v = init(f)(KEY, x, jnp.array(True))
    p = v["params"]["d"]
    np.testing.assert_allclose(y, hand_dense(p, x), rtol=1e-6)
    y2, v2 = apply(f, mutable=["state"])(v, x, jnp.array(False))
    np.testing.assert_allclose(y2, -hand_dense(p, x), rtol=1e-6)
    assert int(v2["state"]["true_count"]) == 1 and int(v2["state"]["false_count"]) == 1


def test_switch_matches_branches() -> None:
    def make(k: float) -> Any:
        def branch(scope: Scope, x: jax.Array) -> jax.Array:
            return k * scope.child(dense, "d")(x, 2)

        return branch

    def f(scope: Scope, x: jax.Array, i: jax.Array) -> jax.Array:
        return lift.switch(i, [make(1.0), make(2.0), make(3.0)], scope, x)

    x = jnp.ones((1, 3))
    _, v = init(f)(KEY, x, jnp.array(0))
    for i in range(3):
        y = apply(f)(v, x, jnp.array(i))
        np.testing.assert_allclose(y, (i + 1) * hand_dense(v["params"]["d"], x), rtol=1e-6)


# ----------------------------------------------------------------------------- variables


def test_map_variables_transposed_view() -> None:
    def f(scope: Scope, x: jax.Array) -> jax.Array:
        return nn.dense(scope, x, 3, bias=False)

    transposed = lift.map_variables(
        f,
        "params",
        map_in_fn=lambda t: jax.tree.map(lambda k: k.T, t),
        map_out_fn=lambda t: jax.tree.map(lambda k: k.T, t),
        init=True,
    )
    x = random.normal(random.key(1), (2, 5))
    _y, v = init(transposed)(KEY, x)
    # Created through the view: stored transposed.
    assert v["params"]["kernel"].shape == (3, 5)
    np.testing.assert_allclose(apply(transposed)(v, x), x @ v["params"]["kernel"].T, rtol=1e-6)


def test_map_variables_read_only_unless_mutable() -> None:
    def bump(scope: Scope) -> None:
        s = scope.variable("state", "n")
        s.value = s.value + 1

    v = {"state": {"n": jnp.zeros(())}}
    double = lambda t: jax.tree.map(lambda a: 2 * a, t)
    half = lambda t: jax.tree.map(lambda a: a / 2, t)
    ro = lift.map_variables(bump, "state", double, half)
    with pytest.raises(Exception, match='"state" is immutable'):
        apply(ro, mutable=True)(v)
    rw = lift.map_variables(bump, "state", double, half, mutable=True)
    _, new = apply(rw, mutable=True)(v)
    np.testing.assert_allclose(new["state"]["n"], 0.5)


def test_swap_collection() -> None:
    def f(scope: Scope) -> jax.Array:
        return scope.get_variable("a", "x")

    v = {"a": {"x": jnp.zeros(())}, "b": {"x": jnp.ones(())}}
    y = apply(lambda s: lift.swap_collection(f, "a", "b")(s), mutable=True)(v)[0]
    assert float(y) == 1.0


def test_fold_rngs_is_deterministic() -> None:
    def draw(scope: Scope) -> jax.Array:
        return random.uniform(scope.make_rng("noise"), (2,))

    def f(scope: Scope) -> tuple[jax.Array, jax.Array]:
        return lift.fold_rngs(draw)(scope), lift.fold_rngs(draw)(scope)

    rngs = {"noise": random.key(4)}
    a, b = apply(f)({}, rngs=rngs)
    a2, _ = apply(f)({}, rngs=rngs)
    np.testing.assert_allclose(a, a2)
    assert not np.allclose(a, b)


# ----------------------------------------------------------------------------- nesting


def test_vmap_of_scan_of_remat() -> None:
    def body(scope: Scope, c: jax.Array, _: Any) -> Any:
        return jnp.tanh(nn.dense(scope, c, c.shape[-1])), None

    inner = lift.scan(
        lift.remat(body), variable_axes={"params": 0}, split_rngs={"params": True}, length=2
    )

    def stack(scope: Scope, x: jax.Array) -> jax.Array:
        return inner(scope, x, None)[0]

    f = lift.vmap(stack, variable_axes={"params": 0}, split_rngs={"params": True})
    xs = random.normal(random.key(1), (3, 4))
    y, v = init(f)(KEY, xs)
    k, b = v["params"]["kernel"], v["params"]["bias"]
    assert k.shape == (3, 2, 4, 4)

    def hand(k: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
        for i in range(2):
            x = jnp.tanh(x @ k[i] + b[i])  # x is one row here
        return x

    np.testing.assert_allclose(y, jax.vmap(hand)(k, b, xs), rtol=1e-5)
    np.testing.assert_allclose(apply(f)(v, xs), jax.vmap(hand)(k, b, xs), rtol=1e-5)


def test_jit_inside_vmap() -> None:
    f = lift.vmap(
        lift.jit(dense), variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=(0, None)
    )
    xs = random.normal(random.key(1), (3, 2, 2))
    y, v = init(f)(KEY, xs, 4)
    np.testing.assert_allclose(y, jax.vmap(hand_dense)(v["params"], xs), rtol=1e-5)
