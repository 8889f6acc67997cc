"""pm.jit: traced arrays, static non-arrays, modules as functions, outputs, sharing, donation."""

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import optax
import pytest
from jax.core import Tracer

import pytreemod as pm


class Linear(pm.Module):
    weight: pm.Param
    bias: pm.Param
    name: str = pm.field(static=True, default="linear")

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array, name: str = "linear"):
        self.weight = pm.Param(jax.random.normal(key, (n_in, n_out), dtype=jnp.float32))
        self.bias = pm.Param(jnp.zeros(n_out, dtype=jnp.float32))
        self.name = name

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value

    def encode(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(self(x))


class Tied(pm.Module):
    a: pm.Param
    b: pm.Param


class WithStats(pm.Module):
    weight: pm.Param
    stats: pm.BatchStat


class Pair(NamedTuple):
    first: Any
    second: Any


def _x(n: int = 2) -> jax.Array:
    return jnp.arange(n, dtype=jnp.float32) + 1.0


def _same(a: Any, b: Any) -> bool:
    """Same treedef (static fields included), same leaf types, equal values."""
    la, ta = jtu.tree_flatten(a)
    lb, tb = jtu.tree_flatten(b)
    if ta != tb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if pm.is_array(x) or pm.is_array(y):
            if not (pm.is_array(x) and pm.is_array(y)):
                return False
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not np.allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


# --- arrays traced, everything else static ----------------------------------------------


def test_arrays_are_traced_and_non_arrays_static() -> None:
    traces: list[tuple[Any, ...]] = []

    @pm.jit
    def f(x: jax.Array, fn: Callable[[jax.Array], jax.Array], label: str, scale: float) -> Any:
        traces.append((type(x), fn, label, scale))
        return {label: fn(x) * scale}

    x = _x()
    out = f(x, jnp.sin, "a", 2.0)
    np.testing.assert_allclose(out["a"], jnp.sin(x) * 2.0, rtol=1e-6)
    # The array is a tracer inside; the others are the Python objects themselves.
    assert issubclass(traces[0][0], Tracer)
    assert traces[0][1:] == (jnp.sin, "a", 2.0)
    assert type(traces[0][3]) is float

    f(x + 1.0, jnp.sin, "a", 2.0)  # new array values, same statics: no retrace
    assert len(traces) == 1
    f(x, jnp.cos, "a", 2.0)  # new function
    assert len(traces) == 2
    f(x, jnp.cos, "b", 2.0)  # new string
    assert len(traces) == 3
    out = f(x, jnp.cos, "b", 3.0)  # new float
    assert len(traces) == 4
    np.testing.assert_allclose(out["b"], jnp.cos(x) * 3.0, rtol=1e-6)
    for args in [(jnp.sin, "a", 2.0), (jnp.cos, "a", 2.0), (jnp.cos, "b", 3.0)]:
        f(x, *args)  # all cached
    assert len(traces) == 4


def test_python_ints_and_bools_are_static() -> None:
    traces: list[Any] = []

    @pm.jit
    def f(x: jax.Array, n: int, flag: bool) -> jax.Array:
        traces.append((n, flag))
        assert isinstance(n, int) and isinstance(flag, bool)
        for _ in range(n):  # Python control flow on static values
            x = x * 2.0
        return -x if flag else x

    x = _x()
    np.testing.assert_allclose(f(x, 3, False), x * 8.0)
    np.testing.assert_allclose(f(x, 3, True), -x * 8.0)
    np.testing.assert_allclose(f(x, 1, True), -x * 2.0)
    f(x, 3, False)
    assert traces == [(3, False), (3, True), (1, True)]


def test_equal_statics_of_different_types_trace_apart() -> None:
    # 1 == 1.0 == True and they hash alike, but they are different programs.
    traces: list[Any] = []

    @pm.jit
    def f(x: jax.Array, s: Any) -> Any:
        traces.append(s)
        return x, jnp.asarray(s), s

    x = _x()
    outs = [f(x, s) for s in (1, 1.0, True, 1)]
    assert [type(t) for t in traces] == [int, float, bool]
    assert [type(o[2]) for o in outs] == [int, float, bool, int]
    assert [o[1].dtype for o in outs] == [jnp.int32, jnp.float32, jnp.bool_, jnp.int32]


def test_kwargs_arrays_traced_and_statics_static() -> None:
    traces: list[Any] = []

    @pm.jit
    def f(x: jax.Array, *, y: jax.Array, mode: str = "add") -> jax.Array:
        traces.append((type(y), mode))
        return x + y if mode == "add" else x * y

    x, x2 = _x(), _x()
    np.testing.assert_allclose(f(x, y=x2), 2 * x)
    np.testing.assert_allclose(f(x, y=x + 1.0), 2 * x + 1.0)
    np.testing.assert_allclose(f(x, y=x2, mode="mul"), x * x)
    assert len(traces) == 2
    assert issubclass(traces[0][0], Tracer)


def test_decorator_with_and_without_arguments() -> None:
    counts = {"bare": 0, "empty": 0, "kw": 0}

    @pm.jit
    def bare(x: jax.Array) -> jax.Array:
        counts["bare"] += 1
        return x + 1.0

    @pm.jit()
    def empty(x: jax.Array) -> jax.Array:
        counts["empty"] += 1
        return x + 2.0

    @pm.jit(donate_argnums=())
    def kw(x: jax.Array) -> jax.Array:
        counts["kw"] += 1
        return x + 3.0

    x = _x()
    for _ in range(2):
        np.testing.assert_allclose(bare(x), x + 1.0)
        np.testing.assert_allclose(empty(x), x + 2.0)
        np.testing.assert_allclose(kw(x), x + 3.0)
    assert counts == {"bare": 1, "empty": 1, "kw": 1}
    assert bare.__name__ == "bare"


def test_jit_kwargs_are_passed_to_jax_jit() -> None:
    # keep_unused is a jax.jit option: with it, the unused argument is a parameter.
    f = pm.jit(lambda x, unused: x * 2.0, keep_unused=True)
    x = _x()
    np.testing.assert_allclose(f(x, x), 2 * x)
    assert len(jax.tree.leaves(f.lower(x, x).args_info)) == 2  # type: ignore[attr-defined]


# --- modules and bound methods as the function ------------------------------------------


def test_module_as_function_traces_its_arrays(getkey: Callable[[], jax.Array]) -> None:
    model = Linear(2, 3, key=getkey())
    seen: list[Any] = []

    class Probe(pm.Module):
        inner: Linear

        def __call__(self, x: jax.Array) -> jax.Array:
            seen.append(self.inner.weight.value)
            return self.inner(x)

    probe = Probe(model)
    x = _x()
    out = pm.jit(probe)(x)
    np.testing.assert_allclose(out, model(x), rtol=1e-6)
    assert isinstance(seen[-1], Tracer)  # not a baked-in constant
    # weight, bias and x are the three parameters of the compiled program.
    lowered = pm.jit(probe).lower(x)  # type: ignore[attr-defined]
    assert len(jax.tree.leaves(lowered.args_info)) == 3


def test_bound_method_as_function(getkey: Callable[[], jax.Array]) -> None:
    model = Linear(2, 3, key=getkey())
    x = _x()
    out = pm.jit(model.encode)(x)
    np.testing.assert_allclose(out, model.encode(x), rtol=1e-6)
    lowered = pm.jit(model.encode).lower(x)  # type: ignore[attr-defined]
    assert len(jax.tree.leaves(lowered.args_info)) == 3


def test_bound_method_argument_new_weights_no_retrace(getkey: Callable[[], jax.Array]) -> None:
    traces = []

    @pm.jit
    def apply(f: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
        traces.append(1)
        return f(x)

    m1, m2 = Linear(2, 3, key=getkey()), Linear(2, 3, key=getkey())
    x = _x()
    y1, y2 = apply(m1.encode, x), apply(m2.encode, x)
    np.testing.assert_allclose(y1, m1.encode(x), rtol=1e-6)
    np.testing.assert_allclose(y2, m2.encode(x), rtol=1e-6)
    assert not np.allclose(y1, y2)
    assert len(traces) == 1
    # A different static field is a different program.
    m3 = Linear(2, 3, key=getkey(), name="other")
    apply(m3.encode, x)
    assert len(traces) == 2


def test_jitted_method_in_class_body(getkey: Callable[[], jax.Array]) -> None:
    traces = []

    class Model(pm.Module):
        weight: pm.Param

        @pm.jit
        def forward(self, x: jax.Array) -> jax.Array:
            traces.append(1)
            return x * self.weight.value

    x = _x()
    m1 = Model(pm.Param(jnp.full(2, 2.0, dtype=jnp.float32)))
    m2 = Model(pm.Param(jnp.full(2, 5.0, dtype=jnp.float32)))
    np.testing.assert_allclose(m1.forward(x), 2.0 * x)
    np.testing.assert_allclose(m2.forward(x), 5.0 * x)  # new weights, same program
    assert len(traces) == 1


# --- outputs -----------------------------------------------------------------------------


def test_output_round_trips_exactly(getkey: Callable[[], jax.Array]) -> None:
    model = Linear(2, 3, key=getkey(), name="enc")
    params = pm.state(model, "params")
    opt = optax.chain(optax.scale_by_schedule(lambda c: 0.5), optax.sgd(0.1, momentum=0.9))
    opt_state = opt.init(params)

    def step(model: Linear, opt_state: Any, x: jax.Array) -> Any:
        grads = pm.grad(lambda m: jnp.sum(m(x) ** 2))(model)
        g = pm.state(grads, "params")
        updates, new_state = opt.update(g, opt_state)
        new = pm.combine(
            pm.partition(model, "params")[0],
            cast(dict[str, Any], optax.apply_updates(params, updates)),
        )
        return {
            "model": new,
            "opt_state": new_state,
            "pair": Pair(model.bias, "label"),
            "fn": jnp.tanh,
            "const": 1.5,
            "count": 3,
            "flag": True,
            "none": None,
            "loss": jnp.sum(model(x) ** 2),
        }

    x = _x()
    expected = step(model, opt_state, x)
    jitted = pm.jit(step)
    for _ in range(2):  # the first call traces, the second rebuilds from the cache
        out = jitted(model, opt_state, x)
        assert _same(out, expected)
        assert type(out["model"]) is Linear and out["model"].name == "enc"
        assert type(out["pair"]) is Pair
        assert type(out["opt_state"][0]) is type(expected["opt_state"][0])
        assert out["opt_state"][0].count.dtype == jnp.int32
        assert out["fn"] is jnp.tanh and out["none"] is None
        assert type(out["const"]) is float and type(out["count"]) is int
        assert out["flag"] is True


def test_single_array_and_plain_tuple_outputs() -> None:
    x = _x()
    assert isinstance(pm.jit(lambda x: x * 2.0)(x), jax.Array)
    out = pm.jit(lambda x: (x, (x + 1.0,)))(x)
    assert type(out) is tuple and type(out[1]) is tuple
    np.testing.assert_allclose(out[1][0], x + 1.0)
    assert pm.jit(lambda x: None)(x) is None


def test_static_output_that_depends_on_input_shape() -> None:
    traces: list[int] = []

    @pm.jit
    def f(x: jax.Array) -> Any:
        traces.append(x.shape[0])
        return {"y": x * 2.0, "n": x.shape[0], "tag": "even" if x.shape[0] % 2 == 0 else "odd"}

    a, b = jnp.ones(2, dtype=jnp.float32), jnp.ones(3, dtype=jnp.float32)
    for _ in range(3):
        for x, n, tag in [(a, 2, "even"), (b, 3, "odd")]:
            out = f(x)
            assert out["n"] == n and out["tag"] == tag
            np.testing.assert_allclose(out["y"], 2 * x)
    warm = len(traces)
    for _ in range(2):
        assert f(a)["n"] == 2 and f(b)["n"] == 3
    assert len(traces) == warm  # every shape compiled once, no retrace afterwards


# --- shared (tied) variables --------------------------------------------------------------


def test_shared_variable_stays_shared_inside_and_out() -> None:
    p = pm.Param(jnp.ones(2, dtype=jnp.float32))
    tied = Tied(p, p)
    inside: list[bool] = []

    @pm.jit
    def ident(t: Tied) -> Tied:
        inside.append(t.a is t.b)
        return t

    out = ident(tied)
    assert inside == [True]
    assert out.a is out.b
    np.testing.assert_allclose(out.a.value, p.value)
    out2 = ident(tied)  # cached shared path
    assert out2.a is out2.b and len(inside) == 1
    # Untied (equal values, distinct Variables) is a different structure.
    untied = Tied(pm.Param(jnp.ones(2, dtype=jnp.float32)), pm.Param(jnp.ones(2, jnp.float32)))
    out3 = ident(untied)
    assert inside == [True, False]
    assert out3.a is not out3.b


def test_shared_variable_gradient_sums_under_jit() -> None:
    p = pm.Param(jnp.array([1.0, 2.0], dtype=jnp.float32))
    tied = Tied(p, p)
    x = jnp.array([3.0, 5.0], dtype=jnp.float32)

    @pm.jit
    def g(t: Tied) -> Tied:
        return pm.grad(lambda t: jnp.sum(t.a.value * x) + 2.0 * jnp.sum(t.b.value * x))(t)

    grads = g(tied)
    assert grads.a is grads.b
    np.testing.assert_allclose(grads.a.value, 3.0 * x)


def test_shared_variable_with_static_leaves() -> None:
    p = pm.Param(jnp.ones(2, dtype=jnp.float32))
    traces = []

    @pm.jit
    def f(t: Tied, scale: float) -> Tied:
        traces.append(scale)
        return Tied(t.a, pm.Param(t.b.value * scale))

    out = f(Tied(p, p), 2.0)
    np.testing.assert_allclose(out.b.value, 2.0 * p.value)
    f(Tied(p, p), 2.0)
    f(Tied(p, p), 3.0)
    assert traces == [2.0, 3.0]


# --- errors --------------------------------------------------------------------------------


class _Unhashable:
    __hash__ = None  # type: ignore[assignment]


def test_unhashable_non_array_leaf_names_path() -> None:
    f = pm.jit(lambda x, cfg: x)
    with pytest.raises(pm.TransformError, match=r"args\[1\]\.opts.*_Unhashable.*hashable"):
        f(_x(), {"opts": _Unhashable()})
    g = pm.jit(lambda x, **kw: x)
    with pytest.raises(pm.TransformError, match=r"kwargs.*cfg.*_Unhashable"):
        g(_x(), cfg=_Unhashable())


def test_unhashable_leaf_with_shared_variable_names_path() -> None:
    p = pm.Param(jnp.ones(2, dtype=jnp.float32))
    f = pm.jit(lambda t, cfg: t)
    with pytest.raises(pm.TransformError, match=r"args\[1\].*_Unhashable"):
        f(Tied(p, p), _Unhashable())


@pytest.mark.parametrize("bad", ["static_argnums", "static_argnames", "donate_argnames"])
def test_static_and_donate_names_rejected(bad: str) -> None:
    kwargs: dict[str, Any] = {bad: (0,)}
    with pytest.raises(pm.TransformError, match=f"jit does not take {bad}"):
        pm.jit(lambda x: x, **kwargs)
    with pytest.raises(pm.TransformError, match=bad):
        pm.jit(**kwargs)


# --- donation -------------------------------------------------------------------------------


def _stats_model() -> WithStats:
    return WithStats(
        pm.Param(jnp.ones((4, 4), dtype=jnp.float32)),
        pm.BatchStat(jnp.zeros((4, 4), dtype=jnp.float32)),
    )


def _update(m: WithStats, x: jax.Array) -> tuple[WithStats, jax.Array]:
    new = WithStats(pm.Param(m.weight.value + 1.0), pm.BatchStat(m.stats.value + 1.0))
    return new, x * 2.0


def test_donate_argnums_int_deletes_only_donated_inputs() -> None:
    m, x = _stats_model(), jnp.ones((4, 4), dtype=jnp.float32)
    f = pm.jit(_update, donate_argnums=0)
    new, y = f(m, x)
    assert m.weight.value.is_deleted() and m.stats.value.is_deleted()
    assert not x.is_deleted()
    np.testing.assert_allclose(new.weight.value, 2.0)
    np.testing.assert_allclose(y, 2.0)


def test_donate_state_deletes_only_selected_state() -> None:
    m, x = _stats_model(), jnp.ones((4, 4), dtype=jnp.float32)
    f = pm.jit(_update, donate_argnums=(pm.DonateState(0, "params"),))
    new, _ = f(m, x)
    assert m.weight.value.is_deleted()
    assert not m.stats.value.is_deleted()
    assert not x.is_deleted()
    np.testing.assert_allclose(new.stats.value, 1.0)
    # By Variable type too, and on the second positional argument.
    m2, x2 = _stats_model(), jnp.ones((4, 4), dtype=jnp.float32)
    g = pm.jit(_update, donate_argnums=(pm.DonateState(0, pm.BatchStat), 1))
    g(m2, x2)
    assert m2.stats.value.is_deleted() and x2.is_deleted()
    assert not m2.weight.value.is_deleted()


def test_donation_survives_shape_dependent_retrace() -> None:
    # The output's static part depends on the shape: calls are then keyed by shape, and
    # every such compilation still donates.
    f = pm.jit(lambda x: (x + 1.0, x.shape[0]), donate_argnums=0)
    for n in (2, 3, 2, 3):
        x = jnp.ones(n, dtype=jnp.float32)
        y, size = f(x)
        assert size == n
        assert x.is_deleted()
        np.testing.assert_allclose(y, 2.0)


def test_lower_shows_donation_and_compiles() -> None:
    m, x = _stats_model(), jnp.ones((4, 4), dtype=jnp.float32)
    donating = pm.jit(_update, donate_argnums=(pm.DonateState(0, "params"),))
    text = donating.lower(m, x).as_text()  # type: ignore[attr-defined]
    assert "tf.aliasing_output" in text or "jax.buffer_donor" in text
    plain = pm.jit(_update)
    lowered = plain.lower(m, x)  # type: ignore[attr-defined]
    plain_text = lowered.as_text()
    assert "tf.aliasing_output" not in plain_text and "jax.buffer_donor" not in plain_text
    compiled = lowered.compile()
    # The compiled program takes the arguments as given and returns the output's arrays
    # in order.
    outs = compiled(m, x)
    np.testing.assert_allclose(outs[0], 2.0)
    np.testing.assert_allclose(outs[2], 2.0)


# ----------------------------------------------------------------------------- retraces


def test_python_int_counter_warns_once_naming_the_argument() -> None:
    @pm.jit
    def step(x: jax.Array, i: int) -> jax.Array:
        return x * i

    x = _x()
    for i in range(9):  # nine traces: no warning yet
        step(x, i)
    with pytest.warns(
        pm.RetraceWarning,
        match=r"`step` has been traced and compiled 10 times: `i` \(argument 1\) is a Python "
        r"int \(a compile-time constant\) that took 10 values \(0, 1, 2, 3, \.\.\.\)\. Pass "
        r"it as an array",
    ):
        step(x, 9)
    step(x, 10)  # once only (pytest turns a second warning into an error)


def test_changing_shapes_warn_with_the_shapes() -> None:
    f = pm.jit(lambda m, x: jax.vmap(m)(x).sum(), warn_retraces=3)
    m = Linear(2, 3, key=jax.random.key(0))
    f(m, jnp.ones((1, 2)))
    f(m, jnp.ones((2, 2)))
    with pytest.warns(
        pm.RetraceWarning,
        match=r"`x` \(argument 1\) had 3 shapes/dtypes \(float32\[1, 2\], float32\[2, 2\], "
        r"float32\[3, 2\]\)\. Every new shape or dtype compiles a new version",
    ):
        f(m, jnp.ones((3, 2)))


def test_changing_static_field_and_keyword_argument_are_named() -> None:
    class Scaled(pm.Module):
        w: pm.Param[jax.Array]
        k: int = pm.field(static=True)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.w.value * self.k * x

    m = Scaled(pm.Param(jnp.ones(2)), 1)
    f = pm.jit(lambda m, x: m(x), warn_retraces=2)
    f(m, _x())
    with pytest.warns(
        pm.RetraceWarning,
        match=r"`m` \(argument 0\) at `\.k` is a static field that took 2 values \(1, 2\); "
        r"a static field is part of the compiled program\. Declare it without static=True",
    ):
        f(m.replace(k=2), _x())
    h = pm.jit(lambda t: t["a"], warn_retraces=2)
    h({"a": _x()})
    with pytest.warns(pm.RetraceWarning, match=r"the tree structure or static fields of `t`"):
        h({"a": _x(), "b": _x()})
    g = pm.jit(lambda x, *, scale: x * scale, warn_retraces=2)
    g(_x(), scale=1.0)
    with pytest.warns(pm.RetraceWarning, match=r"keyword argument `scale` is a Python float"):
        g(_x(), scale=2.0)


def test_arrays_and_few_values_do_not_warn() -> None:
    step = pm.jit(lambda x, i: x * i)
    for i in range(30):  # an array counter: one trace
        step(_x(), jnp.asarray(i))
    flag = pm.jit(lambda x, training: x * 2 if training else x)
    for i in range(30):  # a static value that takes two values: two traces
        flag(_x(), i % 2 == 0)
    quiet = pm.jit(lambda x, i: x * i, warn_retraces=None)
    for i in range(12):
        quiet(_x(), i)
    with pytest.raises(pm.TransformError, match=r"warn_retraces must be None or an int >= 2"):
        pm.jit(lambda x: x, warn_retraces=1)


def test_clear_cache_restarts_the_count() -> None:
    f = pm.jit(lambda x, i: x * i, warn_retraces=3)
    f(_x(), 0)
    f(_x(), 1)
    f.clear_cache()  # type: ignore[attr-defined]
    f(_x(), 2)  # the first trace of the new count: no warning
