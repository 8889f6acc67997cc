"""pm.grad / value_and_grad, remat, cond, switch, while_loop and eval_shape over modules.

vmap and scan have their own files (test_vmap.py, test_scan.py).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm


class Linear(pm.Module):
    weight: pm.Param
    bias: pm.Param
    steps: jax.Array  # an int array: never differentiated
    act: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jnp.tanh)

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array):
        self.weight = pm.Param(jax.random.normal(key, (n_in, n_out), dtype=jnp.float32))
        self.bias = pm.Param(jnp.full(n_out, 0.1, dtype=jnp.float32))
        self.steps = jnp.zeros((), dtype=jnp.int32)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(x @ self.weight.value + self.bias.value)


class Block(pm.Module):
    linear: Linear
    scale: pm.Param
    mean: pm.BatchStat

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear(x) * self.scale.value - self.mean.value


class Tied(pm.Module):
    a: pm.Variable[Any]
    b: pm.Variable[Any]


def _block(key: jax.Array) -> Block:
    return Block(
        Linear(3, 2, key=key),
        pm.Param(jnp.array([1.5, -0.5], dtype=jnp.float32)),
        pm.BatchStat(jnp.array([0.25, 0.5], dtype=jnp.float32)),
    )


def _x() -> jax.Array:
    return jnp.array([0.5, -1.0, 2.0], dtype=jnp.float32)


def _loss(m: Block, x: jax.Array) -> jax.Array:
    return jnp.sum(m(x) ** 2)


def _by_hand(m: Block, x: jax.Array) -> dict[str, Any]:
    """The gradient computed with plain jax.grad on a dict of the same arrays."""
    arrays = {
        "w": m.linear.weight.value,
        "b": m.linear.bias.value,
        "scale": m.scale.value,
        "mean": m.mean.value,
    }

    def f(d: dict[str, jax.Array]) -> jax.Array:
        h = jnp.tanh(x @ d["w"] + d["b"])
        return jnp.sum((h * d["scale"] - d["mean"]) ** 2)

    return jax.grad(f)(arrays)


# --- grad -----------------------------------------------------------------------------------


def test_grad_int_argnum_is_module_shaped(getkey: Callable[[], jax.Array]) -> None:
    m, x = _block(getkey()), _x()
    g = pm.grad(_loss)(m, x)
    expected = _by_hand(m, x)
    assert type(g) is Block and type(g.linear) is Linear
    assert type(g.linear.weight) is pm.Param and type(g.mean) is pm.BatchStat
    assert g.linear.act is jnp.tanh  # static fields kept
    np.testing.assert_allclose(g.linear.weight.value, expected["w"], rtol=1e-5)
    np.testing.assert_allclose(g.linear.bias.value, expected["b"], rtol=1e-5)
    np.testing.assert_allclose(g.scale.value, expected["scale"], rtol=1e-5)
    np.testing.assert_allclose(g.mean.value, expected["mean"], rtol=1e-5)
    assert g.linear.steps is None  # int arrays are not differentiated


def test_grad_int_variable_gets_none() -> None:
    class M(pm.Module):
        w: pm.Param
        n: pm.Param

    m = M(pm.Param(jnp.ones(2, dtype=jnp.float32)), pm.Param(jnp.ones(2, dtype=jnp.int32)))
    g = pm.grad(lambda m: jnp.sum(m.w.value * m.n.value.astype(jnp.float32)))(m)
    assert g.n.value is None
    np.testing.assert_allclose(g.w.value, 1.0)


def test_grad_diffstate_is_nested_dict_like_state(getkey: Callable[[], jax.Array]) -> None:
    m, x = _block(getkey()), _x()
    g = pm.grad(_loss, argnums=pm.DiffState(0, "params"))(m, x)
    like = pm.state(m, "params")
    assert isinstance(g, dict)
    # Same keys as the params state: no batch stats, no int array.
    assert jax.tree.structure(g) == jax.tree.structure(
        {"linear": {"weight": 0, "bias": 0}, "scale": 0}
    )
    assert set(like) == {"linear", "scale"} and set(like["linear"]) >= set(g["linear"])
    assert "mean" not in g
    expected = _by_hand(m, x)
    np.testing.assert_allclose(g["linear"]["weight"], expected["w"], rtol=1e-5)
    np.testing.assert_allclose(g["scale"], expected["scale"], rtol=1e-5)


def test_grad_diffstate_matches_state_structure_exactly(getkey: Callable[[], jax.Array]) -> None:
    class M(pm.Module):
        lin: Linear
        mean: pm.BatchStat

    lin = Linear(3, 2, key=getkey())
    lin = lin.replace(steps=None)  # only float params left in the params collection
    m = M(lin, pm.BatchStat(jnp.zeros(2, dtype=jnp.float32)))
    g = pm.grad(lambda m: jnp.sum(m.lin(_x()) - m.mean.value), argnums=pm.DiffState(0, "params"))(m)
    assert jax.tree.structure(g) == jax.tree.structure(pm.state(m, "params"))
    # Filtering by Variable type selects the batch stats instead.
    gs = pm.grad(
        lambda m: jnp.sum(m.lin(_x()) - 3.0 * m.mean.value), argnums=pm.DiffState(0, pm.BatchStat)
    )(m)
    assert jax.tree.structure(gs) == jax.tree.structure(pm.state(m, pm.BatchStat))
    np.testing.assert_allclose(gs["mean"], -3.0)


def test_grad_diffstate_with_value_predicate_and_path_filter(
    getkey: Callable[[], jax.Array],
) -> None:
    m, x = _block(getkey()), _x()
    expected = _by_hand(m, x)
    # A predicate on the value selects by the argument's variables (not their gradients).
    g = pm.grad(
        _loss, argnums=pm.DiffState(0, lambda p, v: isinstance(v, pm.Param) and v.value.ndim == 2)
    )(m, x)
    assert jax.tree.structure(g) == jax.tree.structure({"linear": {"weight": 0}})
    np.testing.assert_allclose(g["linear"]["weight"], expected["w"], rtol=1e-5)
    gb = pm.grad(_loss, argnums=pm.DiffState(0, pm.PathContains("bias")))(m, x)
    assert jax.tree.structure(gb) == jax.tree.structure({"linear": {"bias": 0}})
    np.testing.assert_allclose(gb["linear"]["bias"], expected["b"], rtol=1e-5)


def test_grad_tuple_argnums(getkey: Callable[[], jax.Array]) -> None:
    m, x = _block(getkey()), _x()
    g = pm.grad(_loss, argnums=(0, 1))(m, x)
    assert isinstance(g, tuple) and len(g) == 2
    assert type(g[0]) is Block
    gx = jax.grad(lambda x: _loss(m, x))(x)
    np.testing.assert_allclose(g[1], gx, rtol=1e-5)
    mixed = pm.grad(_loss, argnums=(pm.DiffState(0, "params"), 1))(m, x)
    assert isinstance(mixed[0], dict) and "mean" not in mixed[0]
    np.testing.assert_allclose(mixed[1], gx, rtol=1e-5)
    single = pm.grad(_loss, argnums=(1,))(m, x)
    assert isinstance(single, tuple) and len(single) == 1


def test_grad_negative_argnum(getkey: Callable[[], jax.Array]) -> None:
    m, x = _block(getkey()), _x()
    gx = pm.grad(_loss, argnums=-1)(m, x)
    np.testing.assert_allclose(gx, jax.grad(lambda x: _loss(m, x))(x), rtol=1e-5)


def test_grad_has_aux_and_value_and_grad(getkey: Callable[[], jax.Array]) -> None:
    m, x = _block(getkey()), _x()

    def loss_aux(m: Block, x: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        y = m(x)
        return jnp.sum(y**2), {"y": y, "tag": "aux"}

    g, aux = pm.grad(loss_aux, has_aux=True)(m, x)
    assert type(g) is Block and aux["tag"] == "aux"
    np.testing.assert_allclose(aux["y"], m(x), rtol=1e-6)
    (value, aux2), g2 = pm.value_and_grad(loss_aux, has_aux=True)(m, x)
    np.testing.assert_allclose(value, _loss(m, x), rtol=1e-6)
    assert aux2["tag"] == "aux"
    np.testing.assert_allclose(g2.scale.value, g.scale.value, rtol=1e-6)
    value3, g3 = pm.value_and_grad(_loss)(m, x)
    np.testing.assert_allclose(value3, _loss(m, x), rtol=1e-6)
    np.testing.assert_allclose(g3.linear.weight.value, _by_hand(m, x)["w"], rtol=1e-5)


def test_grad_as_decorator_and_kwargs_not_differentiated(getkey: Callable[[], jax.Array]) -> None:
    m = _block(getkey())

    @pm.grad(argnums=0)
    def g(m: Block, *, x: jax.Array) -> jax.Array:
        return _loss(m, x)

    out = g(m, x=_x())
    np.testing.assert_allclose(out.scale.value, _by_hand(m, _x())["scale"], rtol=1e-5)


def test_tied_weights_gradient_is_sum_over_uses() -> None:
    p = pm.Param(jnp.array([1.0, 2.0], dtype=jnp.float32))
    tied = Tied(p, p)
    x = jnp.array([3.0, 5.0], dtype=jnp.float32)

    def loss(t: Tied) -> jax.Array:
        return jnp.sum(t.a.value * x) + 2.0 * jnp.sum(t.b.value**2)

    g = pm.grad(loss)(tied)
    assert g.a is g.b
    np.testing.assert_allclose(g.a.value, x + 4.0 * p.value)
    gs = pm.grad(loss, argnums=pm.DiffState(0, "params"))(tied)
    assert list(gs) == ["a"]  # one entry for the one variable, at its first path
    np.testing.assert_allclose(gs["a"], x + 4.0 * p.value)
    # Untied (distinct Variables, equal values): each gets its own gradient.
    untied = Tied(pm.Param(p.value), pm.Param(p.value))
    gu = pm.grad(loss)(untied)
    np.testing.assert_allclose(gu.a.value, x)
    np.testing.assert_allclose(gu.b.value, 4.0 * p.value)


def test_grad_invalid_argnums() -> None:
    f = lambda a, b: jnp.sum(a * b)
    x = jnp.ones(2, dtype=jnp.float32)
    with pytest.raises(pm.TransformError, match=r"refers to argument 2 .* got 2 positional"):
        pm.grad(f, argnums=2)(x, x)
    with pytest.raises(pm.TransformError, match=r"refers to argument -3"):
        pm.grad(f, argnums=(0, -3))(x, x)
    with pytest.raises(pm.TransformError, match=r"refers to argument 5"):
        pm.grad(f, argnums=pm.DiffState(5, "params"))(x, x)
    with pytest.raises(pm.TransformError, match=r"must be ints or DiffState.*'a'"):
        pm.grad(f, argnums="a")  # type: ignore[arg-type]
    with pytest.raises(pm.TransformError, match=r"must be ints or DiffState.*True"):
        pm.grad(f, argnums=True)
    with pytest.raises(pm.TransformError, match=r"must be ints or DiffState.*1.0"):
        pm.value_and_grad(f, argnums=(0, 1.0))  # type: ignore[arg-type]


# --- remat ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [
        None,
        jax.checkpoint_policies.nothing_saveable,
        jax.checkpoint_policies.everything_saveable,
        jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    ],
)
def test_remat_same_values_and_gradients(
    getkey: Callable[[], jax.Array], policy: Callable[..., bool] | None
) -> None:
    m, x = _block(getkey()), _x()
    remat_loss = pm.remat(_loss, policy=policy)
    np.testing.assert_allclose(remat_loss(m, x), _loss(m, x), rtol=1e-6)
    g, gr = pm.grad(_loss)(m, x), pm.grad(remat_loss)(m, x)
    assert jax.tree.structure(g) == jax.tree.structure(gr)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(gr)):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    # It really is a checkpoint in the program.
    jaxpr = str(jax.make_jaxpr(lambda m, x: remat_loss(m, x))(m, x))
    assert "checkpoint" in jaxpr or "remat" in jaxpr


def test_remat_returns_modules_and_shares(getkey: Callable[[], jax.Array]) -> None:
    p = pm.Param(jnp.ones(2, dtype=jnp.float32))
    out = pm.checkpoint(lambda t, s: (Tied(t.a, pm.Param(t.b.value * 2.0)), t, s))(
        Tied(p, p), "label"
    )
    assert type(out[0]) is Tied and out[2] == "label"
    assert out[1].a is out[1].b
    np.testing.assert_allclose(out[0].b.value, 2.0)

    @pm.remat(policy=jax.checkpoint_policies.nothing_saveable)
    def f(m: Block, x: jax.Array) -> jax.Array:
        return _loss(m, x)

    m = _block(getkey())
    np.testing.assert_allclose(f(m, _x()), _loss(m, _x()), rtol=1e-6)


# --- cond / switch ----------------------------------------------------------------------------


def test_cond_with_modules(getkey: Callable[[], jax.Array]) -> None:
    m, x = _block(getkey()), _x()

    def bump(m: Block, x: jax.Array) -> tuple[Block, jax.Array]:
        return m.replace(mean=pm.BatchStat(m.mean.value + 1.0)), m(x)

    def keep(m: Block, x: jax.Array) -> tuple[Block, jax.Array]:
        return m, -m(x)

    @jax.jit
    def run(pred: jax.Array, m: Block, x: jax.Array) -> tuple[Block, jax.Array]:
        return pm.cond(pred, bump, keep, m, x)

    m1, y1 = run(jnp.array(True), m, x)
    m0, y0 = run(jnp.array(False), m, x)
    assert type(m1) is Block and m1.linear.act is jnp.tanh
    np.testing.assert_allclose(m1.mean.value, m.mean.value + 1.0)
    np.testing.assert_allclose(m0.mean.value, m.mean.value)
    np.testing.assert_allclose(y1, m(x), rtol=1e-6)
    np.testing.assert_allclose(y0, -m(x), rtol=1e-6)


def test_cond_branches_with_different_structures_rejected() -> None:
    t = Tied(pm.Param(jnp.ones(2, dtype=jnp.float32)), pm.Param(jnp.ones(2, dtype=jnp.float32)))
    with pytest.raises(pm.TransformError, match=r"cond: branch 1 returns .* but branch 0"):
        pm.cond(jnp.array(True), lambda t: t, lambda t: (t, t.a.value), t)
    with pytest.raises(pm.TransformError, match=r"cond: branch 1 returns"):
        # Same number of arrays, different Variable types.
        pm.cond(jnp.array(True), lambda t: t, lambda t: Tied(t.a, pm.BatchStat(t.b.value)), t)

    class S(pm.Module):
        w: pm.Param
        k: int = pm.field(static=True, default=1)

    s = S(pm.Param(jnp.ones(2, dtype=jnp.float32)))
    with pytest.raises(pm.TransformError, match=r"every branch must return the same"):
        pm.cond(jnp.array(False), lambda s: s, lambda s: s.replace(k=2), s)


def test_switch_with_modules() -> None:
    t = Tied(pm.Param(jnp.ones(2, dtype=jnp.float32)), pm.Param(jnp.ones(2, dtype=jnp.float32)))
    branches = [
        lambda t, s: Tied(pm.Param(t.a.value * s), t.b),
        lambda t, s: Tied(t.a, pm.Param(t.b.value * s)),
        lambda t, s: t,
    ]
    s = jnp.array(3.0, dtype=jnp.float32)
    out = [pm.switch(jnp.array(i), branches, t, s) for i in range(3)]
    np.testing.assert_allclose(out[0].a.value, 3.0)
    np.testing.assert_allclose(out[0].b.value, 1.0)
    np.testing.assert_allclose(out[1].b.value, 3.0)
    np.testing.assert_allclose(out[2].a.value, 1.0)
    np.testing.assert_allclose(jax.jit(lambda i: pm.switch(i, branches, t, s))(1).b.value, 3.0)


def test_switch_branches_with_different_structures_rejected() -> None:
    x = jnp.ones(2, dtype=jnp.float32)
    with pytest.raises(pm.TransformError, match=r"switch: branch 2 returns .* but branch 0"):
        pm.switch(jnp.array(0), [lambda x: {"a": x}, lambda x: {"a": x}, lambda x: {"b": x}], x)
    with pytest.raises(pm.TransformError, match=r"switch: branch 1"):
        pm.switch(jnp.array(0), [lambda x: x, lambda x: (x, x)], x)


# --- while_loop -------------------------------------------------------------------------------


def test_while_loop_with_module_state() -> None:
    class Counter(pm.Module):
        count: pm.BatchStat
        total: pm.Param
        limit: int = pm.field(static=True, default=5)

    init = Counter(
        pm.BatchStat(jnp.zeros((), dtype=jnp.int32)), pm.Param(jnp.ones(2, dtype=jnp.float32))
    )

    def body(c: Counter) -> Counter:
        return c.replace(count=pm.BatchStat(c.count.value + 1), total=pm.Param(c.total.value * 2.0))

    out = pm.while_loop(lambda c: c.count.value < c.limit, body, init)
    assert type(out) is Counter and out.limit == 5 and type(out.count) is pm.BatchStat
    assert int(out.count.value) == 5
    np.testing.assert_allclose(out.total.value, 32.0)
    jitted = jax.jit(lambda c: pm.while_loop(lambda c: c.count.value < c.limit, body, c))(init)
    np.testing.assert_allclose(jitted.total.value, 32.0)


def test_while_loop_keeps_sharing() -> None:
    p = pm.Param(jnp.ones(2, dtype=jnp.float32))
    out = pm.while_loop(
        lambda s: s[1] < 3,
        lambda s: (_retie(s[0]), s[1] + 1),
        (Tied(p, p), jnp.zeros((), dtype=jnp.int32)),
    )
    assert out[0].a is out[0].b
    np.testing.assert_allclose(out[0].a.value, 4.0)


def _retie(t: Tied) -> Tied:
    q = pm.Param(t.a.value + 1.0)
    return Tied(q, q)


def test_while_loop_body_changing_structure_rejected() -> None:
    p = pm.Param(jnp.ones(2, dtype=jnp.float32))
    t = Tied(p, pm.Param(jnp.ones(2, dtype=jnp.float32)))
    with pytest.raises(pm.TransformError, match=r"while_loop: body_fun returned .* differs"):
        pm.while_loop(lambda t: False, lambda t: Tied(t.a, pm.BatchStat(t.b.value)), t)
    with pytest.raises(pm.TransformError, match=r"while_loop: body_fun"):
        bad_body: Any = lambda t: (t, t.a.value)  # returns a tuple: a type error on purpose
        pm.while_loop(lambda t: False, bad_body, t)
    with pytest.raises(pm.TransformError, match=r"while_loop: body_fun"):
        # Tying two variables that were separate is a structure change too.
        pm.while_loop(lambda t: False, lambda t: Tied(t.a, t.a), t)


# --- eval_shape ---------------------------------------------------------------------------


class Big(pm.Module):
    weight: pm.Param
    boxed: pm.Param
    n: int = pm.field(static=True)
    act: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jax.nn.relu)

    def __init__(self, key: jax.Array, n: int = 8):
        k1, k2 = jax.random.split(key)
        self.weight = pm.Param(jax.random.normal(k1, (n, n), dtype=jnp.float32))
        init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), ("embed", "mlp"))
        self.boxed = pm.Param(init(k2, (n, 4), jnp.bfloat16))
        self.n = n


def test_eval_shape_gives_shapes_and_statics(getkey: Callable[[], jax.Array]) -> None:
    shapes = pm.eval_shape(Big, getkey())
    assert type(shapes) is Big and shapes.n == 8 and shapes.act is jax.nn.relu
    assert type(shapes.weight) is pm.Param
    assert isinstance(shapes.weight.value, jax.ShapeDtypeStruct)
    assert shapes.weight.value.shape == (8, 8) and shapes.weight.value.dtype == jnp.float32
    box = shapes.boxed.value
    assert isinstance(box, pm.Partitioned) and box.names == ("embed", "mlp")
    assert isinstance(box.value, jax.ShapeDtypeStruct) and box.value.dtype == jnp.bfloat16
    # Same structure as a real model.
    real = Big(getkey())
    assert jax.tree.structure(shapes) == jax.tree.structure(real)
    kwargs_shapes = pm.eval_shape(Big, key=getkey(), n=3)
    assert kwargs_shapes.n == 3 and kwargs_shapes.weight.value.shape == (3, 3)


def test_eval_shape_does_not_allocate(getkey: Callable[[], jax.Array]) -> None:
    # 2**17 x 2**17 float32 is 64 GiB: building it for real would fail or take ages.
    shapes = pm.eval_shape(lambda k: Big(k, n=2**17), getkey())
    assert shapes.weight.value.shape == (2**17, 2**17)
