"""pm.jit's fast path: arguments recognised without walking or flattening them (arrays,
containers of arrays, the previous output's modules, objects checked before), what it
keeps alive (nothing the caller let go of), and when a call is checked again."""

from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.core import Tracer

import pytreemod as pm

from .test_jit import Linear, Tied, WithStats, _x


def _slow_calls(f: Any) -> Callable[[], int]:
    """Count the calls of ``f`` that walk their arguments (the checked path)."""
    wrapper = f._pytreemod_jit
    count = [0]
    original = wrapper._resolve  # every checked call resolves its entry

    def counting(*a: Any, **k: Any) -> Any:
        count[0] += 1
        return original(*a, **k)

    wrapper._resolve = counting
    return lambda: count[0]


def _step_fn() -> Any:
    @pm.jit
    def step(m: Linear, s: Any, x: jax.Array) -> Any:
        m = pm.tree_at(lambda m: m.weight, m, pm.Param(m.weight.value + x.sum()))
        return m, (s[0] + 1.0, s[1]), x.sum()

    return step


def test_training_loop_takes_fast_path_after_two_calls(getkey: Callable[[], jax.Array]) -> None:
    step = _step_fn()
    slow = _slow_calls(step)
    m, s = Linear(2, 2, key=getkey()), (jnp.zeros(()), jnp.ones(2))
    start = m.weight.value
    for i in range(6):
        m, s, _ = step(m, s, jnp.ones(2) * i)
    # First call: checked; second: its arguments are the first output, a new pattern;
    # every later call passes the previous output straight to jax.jit.
    assert slow() == 2
    np.testing.assert_allclose(m.weight.value, start + 2.0 * sum(range(6)), rtol=1e-6)
    np.testing.assert_allclose(s[0], 6.0)


def test_fixed_model_forward_takes_fast_path(getkey: Callable[[], jax.Array]) -> None:
    f = pm.jit(lambda m, x: m(x))
    slow = _slow_calls(f)
    m = Linear(2, 3, key=getkey())
    for i in range(4):
        np.testing.assert_allclose(f(m, _x() * i), m(_x() * i), rtol=1e-6)
    assert slow() == 1


def test_batch_dict_of_arrays_takes_fast_path(getkey: Callable[[], jax.Array]) -> None:
    f = pm.jit(lambda m, batch: m(batch["x"]) + batch["y"])
    slow = _slow_calls(f)
    m = Linear(2, 2, key=getkey())
    for i in range(3):
        batch = {"x": _x() * i, "y": jnp.ones(2)}
        np.testing.assert_allclose(f(m, batch), m(batch["x"]) + 1.0, rtol=1e-6)
    assert slow() == 1
    # The same structure with a Python number in it is static again: checked, retraced.
    out = f(m, {"x": _x(), "y": 1.0})
    np.testing.assert_allclose(out, m(_x()) + 1.0, rtol=1e-6)
    assert slow() == 2


def test_dict_with_other_keys_leaves_the_fast_path(getkey: Callable[[], jax.Array]) -> None:
    # A learned pattern recognises a dict by its length and keys: a dict of the same
    # length with another key is checked (and traced) again, not passed through.
    f = pm.jit(lambda m, batch: {k: m(v) for k, v in batch.items()})
    slow = _slow_calls(f)
    m = Linear(2, 2, key=getkey())
    for _ in range(2):
        assert sorted(f(m, {"a": _x(), "b": _x()})) == ["a", "b"]
    assert slow() == 1
    out = f(m, {"a": _x(), "c": _x() * 2})
    assert sorted(out) == ["a", "c"]
    np.testing.assert_allclose(out["c"], m(_x() * 2), rtol=1e-6)
    assert slow() == 2
    assert sorted(f(m, {"a": _x(), "b": _x(), "c": _x()})) == ["a", "b", "c"]
    assert slow() == 3


def test_same_model_passed_twice_after_fast_path_stays_tied(
    getkey: Callable[[], jax.Array],
) -> None:
    # f(m, other) teaches a pattern holding m; f(m, m) must not match it: m twice is a tie.
    f = pm.jit(lambda a, b: (a.weight.value + b.weight.value, a, b))
    m, other = Linear(2, 2, key=getkey()), Linear(2, 2, key=getkey())
    f(m, other)
    f(m, other)
    _, a, b = f(m, m)
    assert a.weight is b.weight


def test_output_passed_with_model_sharing_its_variable_stays_tied(
    getkey: Callable[[], jax.Array],
) -> None:
    # The second argument is new each call and shares a Variable with the first: every
    # call is checked, and the Variable stays one inside and out.
    @pm.jit
    def f(a: Linear, b: Tied) -> Any:
        return a, b

    a = Linear(2, 2, key=getkey())
    for _ in range(3):
        b = Tied(a.weight, pm.Param(jnp.zeros(2)))
        a, b = f(a, b)
        assert a.weight is b.a


def test_python_number_where_an_array_was_is_static(getkey: Callable[[], jax.Array]) -> None:
    traces: list[Any] = []

    @pm.jit
    def f(m: Linear, scale: Any) -> jax.Array:
        traces.append(scale)
        return m(_x()) * scale

    m = Linear(2, 2, key=getkey())
    f(m, jnp.asarray(2.0))
    f(m, jnp.asarray(3.0))
    assert len(traces) == 1 and isinstance(traces[0], Tracer)
    np.testing.assert_allclose(f(m, 2.0), m(_x()) * 2.0, rtol=1e-6)
    assert traces[-1] == 2.0  # a constant, not a tracer


def test_new_shapes_on_fast_path_retrace(getkey: Callable[[], jax.Array]) -> None:
    f = pm.jit(lambda m, x: x * 2.0 + m.bias.value.sum())
    m = Linear(2, 3, key=getkey())
    f(m, jnp.ones(1))
    assert f(m, jnp.ones(5)).shape == (5,)
    np.testing.assert_allclose(f(m, jnp.ones(7)), 2.0)


def test_shape_dependent_output_on_fast_path(getkey: Callable[[], jax.Array]) -> None:
    # The output's static part depends on the shape: once seen, patterns give way to
    # shape-keyed dispatch.
    f = pm.jit(lambda m, x: (x * 2.0 + m.bias.value.sum(), x.shape[0]))
    m = Linear(2, 3, key=getkey())
    for n in (1, 1, 4, 1, 4):
        y, size = f(m, jnp.ones(n))
        assert size == n and y.shape == (n,)


def test_initial_model_not_kept_alive(getkey: Callable[[], jax.Array]) -> None:
    import gc
    import weakref

    step = _step_fn()
    m, s = Linear(2, 2, key=getkey()), (jnp.zeros(()), jnp.ones(2))
    first = weakref.ref(m)
    for i in range(3):
        m, s, _ = step(m, s, jnp.ones(2) * i)
    gc.collect()
    assert first() is None


def _recognised_forward(getkey: Callable[[], jax.Array]) -> tuple[Any, Callable[[], int], Linear]:
    """A jitted forward pass called twice on one model (checked, then recognised), its
    count of checked calls, and the model."""
    f = pm.jit(lambda m, x: m(x))
    slow = _slow_calls(f)
    m = Linear(2, 3, key=getkey())
    f(m, _x())
    f(m, _x())
    return f, slow, m


def test_arguments_recognised_without_keeping_them_alive(getkey: Callable[[], jax.Array]) -> None:
    import gc
    import weakref

    f, slow, m = _recognised_forward(getkey)
    assert slow() == 1  # recognised on the second call...
    ref, weight = weakref.ref(m), weakref.ref(m.weight.value)
    del m
    gc.collect()
    # ...through a weak reference only; the arrays it passes for the model go with it.
    assert ref() is None and weight() is None
    other = Linear(2, 3, key=getkey())  # a new model: checked, then recognised
    np.testing.assert_allclose(f(other, _x()), other(_x()), rtol=1e-6)
    np.testing.assert_allclose(f(other, _x() * 3), other(_x() * 3), rtol=1e-6)
    assert slow() == 2


def test_training_state_and_evaluated_models_freed_after_the_loop(
    getkey: Callable[[], jax.Array],
) -> None:
    # A training loop whose optimizer state holds modules (adam's moments have the model's
    # structure), and an evaluation on each epoch's model: when the caller drops them,
    # nothing of either is kept alive by the jitted functions, yet both run fast.
    import gc
    import weakref

    opt = optax.adam(1e-2)

    @pm.jit
    def step(m: Linear, s: Any, x: jax.Array) -> Any:
        loss, g = pm.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(m)
        u, s = opt.update(g, s, cast(Any, m))
        return optax.apply_updates(cast(Any, m), u), s, loss

    evaluate = pm.jit(lambda m, x: m(x).sum())
    slow_step, slow_eval = _slow_calls(step), _slow_calls(evaluate)
    m = Linear(2, 2, key=getkey())
    s: Any = opt.init(cast(Any, m))
    epochs = []
    with jax.numpy_dtype_promotion("standard"):  # optax's adam: float ** int32 count
        for _ in range(4):
            for _ in range(3):
                m, s, _ = step(m, s, _x())
            evaluate(m, _x())
            evaluate(m, _x() * 2)
            epochs.append(weakref.ref(m))
    assert slow_step() == 2  # the initial state, then the first output's pattern
    assert slow_eval() == 4  # each epoch's new model once
    np.testing.assert_allclose(evaluate(m, _x()), m(_x()).sum(), rtol=1e-6)
    mu = weakref.ref(s[0].mu)  # a module inside the optimizer state
    arrays = [weakref.ref(a) for a in jax.tree.leaves((m, s[0].mu, s[0].nu))]
    del m, s
    gc.collect()
    assert all(ref() is None for ref in epochs)
    assert mu() is None
    assert all(ref() is None for ref in arrays)  # the arrays passed for them as well


def test_a_freed_part_of_the_output_lets_go_of_the_rest(getkey: Callable[[], jax.Array]) -> None:
    # Two modules of one output are recognised on the next call: when the caller frees
    # one of them, the arrays kept for recognising the other are let go of too, and a
    # call passing the survivor is checked again, with the right numbers.
    import gc
    import weakref

    @pm.jit
    def step(a: Linear, b: Linear, x: jax.Array) -> Any:
        grow = lambda m: pm.tree_at(lambda m: m.bias, m, pm.Param(m.bias.value + x.sum()))
        return grow(a), grow(b), a(x) + b(x)

    slow = _slow_calls(step)
    a, b = Linear(2, 2, key=getkey()), Linear(2, 2, key=getkey())
    for _ in range(3):
        a, b, _ = step(a, b, _x())
    assert slow() == 2  # the initial models, then the first output's pattern
    kept = weakref.ref(b.bias.value)
    del b
    gc.collect()
    assert kept() is None  # b's arrays were kept beside a's: both let go
    fresh = Linear(2, 2, key=getkey())
    _, _, y = step(a, fresh, _x())
    np.testing.assert_allclose(y, a(_x()) + fresh(_x()), rtol=1e-6)
    assert slow() == 3


class _Tag(pm.Module):
    name: str = pm.field(static=True)


@pytest.mark.parametrize("tags", [0, 1, 2])
def test_output_modules_without_arrays_are_recognised(
    getkey: Callable[[], jax.Array], tags: int
) -> None:
    # Modules holding no array at all (only static fields) among the output's modules,
    # with or without array-holding ones beside them: passed back, they are recognised.
    @pm.jit
    def step(parts: tuple[Any, ...], x: jax.Array) -> Any:
        return parts, sum(p(x).sum() for p in parts if isinstance(p, Linear)) + x.sum()

    slow = _slow_calls(step)
    model = Linear(2, 2, key=getkey())
    parts: tuple[Any, ...] = tuple(_Tag(f"t{i}") for i in range(tags))
    parts = (*parts, model) if tags != 1 else parts
    for i in range(4):
        parts, y = step(parts, _x() * i)
        want = sum(p(_x() * i).sum() for p in parts if isinstance(p, Linear)) + (_x() * i).sum()
        np.testing.assert_allclose(y, want, rtol=1e-6)
    assert [p.name for p in parts if isinstance(p, _Tag)] == [f"t{i}" for i in range(tags)]
    assert slow() == 2  # the first call, then the first output's pattern


def test_a_dead_patterns_place_is_not_matched_by_none() -> None:
    # A pattern recognising a module whose reference died must not match None there.
    import gc

    f = pm.jit(lambda m, x: x if m is None else m(x))
    slow = _slow_calls(f)
    m = pm.nn.Linear(2, 2, key=jax.random.key(0))
    f(m, _x())
    f(m, _x())
    del m
    gc.collect()
    np.testing.assert_allclose(f(None, _x()), _x())
    assert slow() == 2  # checked, not sent down the dead pattern's path


def test_clear_cache_forgets_patterns(getkey: Callable[[], jax.Array]) -> None:
    f, slow, m = _recognised_forward(getkey)
    f.clear_cache()  # type: ignore[attr-defined]
    f(m, _x())
    assert slow() == 2


class _Bag(pm.Module):
    items: list[Any]


def test_clear_cache_after_mutating_a_list_inside_a_module() -> None:
    # The documented limitation and its fix: a list inside a module changed in place is
    # not looked at again by the fast path; clear_cache() makes the next call check it.
    f = pm.jit(lambda bag: bag)
    w = pm.Param(jnp.ones(2))
    bag = _Bag([w, pm.Param(jnp.zeros(2))])
    f(bag)
    f(bag)  # recognised by identity from now on
    bag.items[1] = w  # in place: the two places now hold one Variable
    f.clear_cache()  # type: ignore[attr-defined]
    out = f(bag)
    assert out.items[0] is out.items[1]  # checked again: the tie is seen and kept


def test_filtered_donation_fast_path(getkey: Callable[[], jax.Array]) -> None:
    @pm.jit(donate_argnums=(pm.DonateState(0, pm.BatchStat),))
    def f(m: WithStats, x: jax.Array) -> Any:
        return pm.tree_at(lambda m: m.stats, m, pm.BatchStat(m.stats.value + x)), x.sum()

    m = WithStats(pm.Param(jnp.ones(2)), pm.BatchStat(jnp.zeros(2)))
    slow = _slow_calls(f)
    for _ in range(4):
        old = m
        m, _ = f(m, jnp.ones(2))
        assert old.stats.value.is_deleted() and not old.weight.value.is_deleted()
    assert slow() == 2
    np.testing.assert_allclose(m.stats.value, 4.0)


def test_module_as_function_fast_path(getkey: Callable[[], jax.Array]) -> None:
    model = Linear(2, 3, key=getkey())
    f = pm.jit(model)
    slow = _slow_calls(f)
    for i in range(3):
        np.testing.assert_allclose(f(_x() * i), model(_x() * i), rtol=1e-6)
    assert slow() == 1


def test_a_new_model_every_call_reuses_the_compiled_test(getkey: Callable[[], jax.Array]) -> None:
    # Each new model is checked once and gets a pattern; patterns of one argument
    # structure share one generated test function, so learning does not exec every call.
    from pytreemod import _jit_patterns

    f, slow, m = _recognised_forward(getkey)
    before = dict(_jit_patterns._FACTORIES)
    for i in range(5):
        other = pm.tree_at(lambda m: m.bias, m, pm.Param(jnp.full(3, float(i))))
        np.testing.assert_allclose(f(other, _x()), other(_x()), rtol=1e-6)
        f(other, _x())  # recognised: its pattern was learned
    assert slow() == 1 + 5
    assert _jit_patterns._FACTORIES == before


def test_compiled_tests_cache_is_bounded(
    getkey: Callable[[], jax.Array], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytreemod import _jit_patterns

    monkeypatch.setattr(_jit_patterns, "_FACTORIES_MAX", 8)
    f = pm.jit(lambda m, batch: m(batch[0]), warn_retraces=None)  # retraces on purpose
    m = Linear(2, 3, key=getkey())
    sizes = []
    for i in range(12):  # a longer tuple, so a new test, each call
        batch = tuple(_x() + j for j in range(i + 1))
        np.testing.assert_allclose(f(m, batch), m(_x()), rtol=1e-6)
        sizes.append(len(_jit_patterns._FACTORIES))
    assert max(sizes) <= 8 and sizes[-1] < sizes[-5]  # full, cleared, filling again


class _One(pm.Module):
    w: pm.Param


def test_an_output_module_with_one_array_beside_other_outputs() -> None:
    # The module holds one of the output's two arrays: it alone is kept for the next call.
    @pm.jit
    def step(m: _One, x: jax.Array) -> Any:
        return m.replace(w=pm.Param(m.w.value + x)), (m.w.value * x).sum()

    slow = _slow_calls(step)
    m = _One(pm.Param(jnp.array([1.0, 2.0])))
    want = np.array([1.0, 2.0])
    for i in range(4):
        x = jnp.array([i, 10.0 * i])
        m, y = step(m, x)
        np.testing.assert_allclose(y, (want * np.asarray(x)).sum())
        want = want + np.asarray(x)
    np.testing.assert_allclose(m.w.value, want)
    assert slow() == 2  # the first call, then the first output's pattern
