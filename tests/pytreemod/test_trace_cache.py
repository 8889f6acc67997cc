"""pm.trace_once: one trace per call configuration under a trace, plain calls otherwise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytreemod as pm


def _count_python_runs() -> tuple[list[int], object]:
    runs = [0]

    def scale(x: jax.Array, factor: float, *, shift: jax.Array | None = None) -> jax.Array:
        runs[0] += 1
        y = x * factor
        return y if shift is None else y + shift

    return runs, pm.trace_once(scale)


def test_repeated_calls_under_a_trace_run_python_once() -> None:
    runs, scale = _count_python_runs()

    def f(x: jax.Array) -> jax.Array:
        for _ in range(5):
            x = scale(x, 2.0)  # type: ignore[operator]
        return x

    jaxpr = jax.make_jaxpr(f)(jnp.ones(3))
    assert runs[0] == 1
    assert [e.primitive.name for e in jaxpr.eqns] == ["jit"] * 5
    np.testing.assert_allclose(jax.jit(f)(jnp.ones(3)), np.full(3, 32.0))


def test_new_shapes_and_static_values_trace_again() -> None:
    runs, scale = _count_python_runs()

    def f(x: jax.Array, y: jax.Array) -> tuple[jax.Array, ...]:
        return (
            scale(x, 2.0),  # type: ignore[operator]
            scale(x, 3.0),  # type: ignore[operator]
            scale(y, 2.0),  # type: ignore[operator]
            scale(x, 2),  # type: ignore[operator]  # an int is not the float 2.0
            scale(x, 2.0, shift=y[:3]),  # type: ignore[operator]
        )

    out = jax.jit(f)(jnp.ones(3), jnp.ones(4))
    assert runs[0] == 5
    np.testing.assert_allclose(out[0], np.full(3, 2.0))
    np.testing.assert_allclose(out[1], np.full(3, 3.0))
    np.testing.assert_allclose(out[4], np.full(3, 3.0))


def test_eager_calls_run_the_function_itself() -> None:
    runs, scale = _count_python_runs()
    ys = [scale(jnp.ones(2), 2.0) for _ in range(3)]  # type: ignore[operator]
    assert runs[0] == 3
    np.testing.assert_array_equal(ys[-1], np.full(2, 2.0))


def test_lists_are_keys_by_value_and_stay_lists() -> None:
    seen: list[type] = []

    @pm.trace_once
    def reshape(x: jax.Array, shape: list[int] | tuple[int, ...]) -> jax.Array:
        seen.append(type(shape))
        return x.reshape(shape)

    f = jax.jit(lambda x: (reshape(x, [2, 3]), reshape(x, [2, 3]), reshape(x, (2, 3))))
    a, b, c = f(jnp.arange(6.0))
    assert seen == [list, tuple]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_unhashable_arguments_fall_back_to_a_plain_call() -> None:
    runs = [0]

    @pm.trace_once
    def pick(x: jax.Array, keys: set[str]) -> jax.Array:  # a set is a leaf, unhashable
        runs[0] += 1
        return x * len(keys)

    out = jax.jit(lambda x: pick(pick(x, {"a", "b"}), {"a", "b"}))(jnp.ones(2))
    assert runs[0] == 2
    np.testing.assert_allclose(out, np.full(2, 4.0))


def test_errors_come_from_the_function_as_without_the_cache() -> None:
    @pm.trace_once
    def check(x: jax.Array, n: int) -> jax.Array:
        if x.shape[0] != n:
            raise ValueError(f"check: expected {n} rows, got {x.shape[0]}")
        return x

    with pytest.raises(ValueError, match="expected 3 rows, got 2"):
        jax.jit(lambda x: check(x, 3))(jnp.ones(2))


def test_functions_needing_concrete_values_still_work() -> None:
    # ``int(table)`` needs a concrete array; inside the nested jit it is a tracer, so the
    # cached trace fails and the function runs as written.
    table = jnp.asarray(3)

    @pm.trace_once
    def repeat(x: jax.Array, count: jax.Array) -> jax.Array:
        return jnp.tile(x, int(count))

    f = jax.jit(lambda x: (repeat(x, table), repeat(x, table)))
    a, b = f(jnp.ones(2))
    assert a.shape == b.shape == (6,)


def test_grad_vmap_and_scan_see_through_the_cache() -> None:
    square = pm.trace_once(lambda x, p: jnp.sum(x**p))
    x = jnp.arange(1.0, 4.0)
    np.testing.assert_allclose(jax.grad(lambda x: square(x, 2))(x), 2 * x)
    np.testing.assert_allclose(jax.vmap(lambda r: square(r, 2))(jnp.stack([x, x])), [14.0, 14.0])
    _, ys = jax.lax.scan(lambda c, r: (c, square(r, 2)), 0.0, jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(ys, [14.0, 56.0])


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    factor=st.floats(-4, 4, allow_nan=False),
)
def test_law_same_values_as_the_plain_function(shape: list[int], factor: float) -> None:
    fn = lambda x, f: jnp.tanh(x) * f + x.sum()
    cached = pm.trace_once(fn)
    x = jnp.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    np.testing.assert_array_equal(
        jax.jit(lambda x: cached(x, factor))(x), jax.jit(lambda x: fn(x, factor))(x)
    )


class _Block(pm.Module):
    norm: pm.nn.LayerNorm
    conv: pm.nn.Conv1d
    linear: pm.nn.Linear

    def __init__(self, *, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.norm = pm.nn.LayerNorm(8)
        self.conv = pm.nn.Conv1d(8, 8, 3, key=k1)
        self.linear = pm.nn.Linear(8, 8, key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.linear(jax.nn.gelu(self.conv(self.norm(x))))


class _Net(pm.Module):
    blocks: tuple[_Block, ...]

    def __init__(self, *, key: jax.Array) -> None:
        self.blocks = tuple(_Block(key=k) for k in jax.random.split(key, 3))

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return x


def _train_step(model: _Net, x: jax.Array) -> tuple[_Net, jax.Array]:
    loss_fn = lambda m: jnp.mean(m(x) ** 2)
    loss, grads = pm.value_and_grad(loss_fn, argnums=pm.DiffState(0, "params"))(model)
    structure, params, rest = pm.partition(model, "params")
    params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    return pm.combine(structure, params, rest), loss


def _optimized_hlo(fn: object, *args: object) -> str:
    """XLA's optimised HLO without source metadata and module name, its instruction and
    computation names renamed in order of appearance: what the compiled program does."""
    import re

    fresh = lambda *a: fn(*a)  # type: ignore[operator]  # a new function: no cached trace
    text = jax.jit(fresh).lower(*args).compile().as_text() or ""
    if "StackFrames" in text:  # the table of source locations the metadata points into
        text = text[text.index("\n\n", text.index("StackFrames")) :]
    text = re.sub(r",? ?metadata=\{[^}]*\}", "", text)
    text = re.sub(r"^HloModule \S+", "HloModule m", text, flags=re.M)
    names: dict[str, str] = {}  # instruction and computation names, by first appearance
    rename = lambda m: names.setdefault(m[1].lstrip("%"), f"n{len(names)}")
    text = re.sub(r"(?<=[(, ])([\w.-]+)(?=: )", rename, text)  # computation parameters
    return re.sub(r"%([\w.-]+)", lambda m: "%" + rename(m), text)


def test_compiled_forward_is_the_same_program_with_and_without_reuse() -> None:
    model = _Net(key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (2, 5, 8))
    forward = lambda m, x: m(x)
    jaxpr = jax.make_jaxpr(lambda m, x: forward(m, x))(model, x)
    assert "jit" in {e.primitive.name for e in jaxpr.eqns}  # the reuse is really on
    with_reuse = _optimized_hlo(forward, model, x)
    with pm.disable_trace_once():
        jaxpr = jax.make_jaxpr(lambda m, x: forward(m, x))(model, x)
        assert "jit" not in {e.primitive.name for e in jaxpr.eqns}
        without = _optimized_hlo(forward, model, x)
    assert with_reuse == without


def test_results_with_and_without_reuse() -> None:
    """Eager calls and jitted forward passes are bit-identical. A jitted train step agrees
    to float32 rounding: differentiated through a nested call, a layer's input cotangent
    is summed inside the call before it is added to the input's other uses (a residual
    branch), so the backward pass may add in another order."""
    model = _Net(key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (2, 5, 8))
    run = lambda: (  # new functions each time: jit has no trace of them cached
        model(x),
        jax.jit(lambda m, x: m(x))(model, x),
        jax.jit(lambda m, x: _train_step(m, x))(model, x),
    )
    eager, forward, step = run()
    with pm.disable_trace_once():
        eager_off, forward_off, step_off = run()
    np.testing.assert_array_equal(eager, eager_off)
    np.testing.assert_array_equal(forward, forward_off)
    for a, b in zip(jax.tree.leaves(step), jax.tree.leaves(step_off), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_call_whose_check_failed_is_checked_again() -> None:
    layer = pm.nn.Linear(3, 2, key=jax.random.key(0))

    def f(x: jax.Array) -> jax.Array:
        for _ in range(2):
            with pytest.raises(pm.ShapeError, match="in_features"):
                layer(x)
        return x

    jax.make_jaxpr(f)(jnp.ones((4, 5)))


# ------------------------------------------------------------------------ inline=True


def _counted_inline() -> tuple[list[int], object]:
    runs = [0]

    @pm.trace_once(inline=True)
    def scale(x: jax.Array, factor: float) -> jax.Array:
        runs[0] += 1
        return x * factor

    return runs, scale


def test_inline_reuse_leaves_the_direct_jaxpr_and_traces_once_per_key() -> None:
    runs, scale = _counted_inline()

    def f(x: jax.Array) -> jax.Array:
        y = scale(scale(x, 2.0), 2.0)  # type: ignore[operator]  # one key: one trace
        y = scale(y, 2)  # type: ignore[operator]  # an int is another key than a float
        return scale(y[:2], 2.0).sum()  # type: ignore[operator]  # another shape

    jaxpr = jax.make_jaxpr(jax.grad(f))(jnp.ones(3))
    assert runs[0] == 3
    assert "jit" not in {e.primitive.name for e in jaxpr.eqns}  # inlined
    with pm.disable_trace_once():
        direct = jax.make_jaxpr(jax.grad(f))(jnp.ones(3))
    assert str(jaxpr) == str(direct)


def test_inline_leaves_eager_calls_and_eager_transforms_as_written() -> None:
    runs, scale = _counted_inline()
    x = jnp.ones(3)
    for _ in range(2):
        scale(x, 2.0)  # type: ignore[operator]
        jax.grad(lambda x: scale(x, 2.0).sum())(x)  # type: ignore[operator]
        jax.vmap(lambda x: scale(x, 2.0))(x)  # type: ignore[operator]
    assert runs[0] == 6  # every call ran the function: none went through a compiled replay


def test_inline_keys_on_the_logical_axis_rules_and_skips_unhashable_leaves() -> None:
    runs, scale = _counted_inline()

    def f(x: jax.Array) -> jax.Array:
        y = scale(x, 2.0)  # type: ignore[operator]
        with pm.logical_axis_rules([("batch", None)]):
            y = scale(y, 2.0)  # type: ignore[operator]
        return scale(y, [2.0][0])  # type: ignore[operator]  # the first key again

    jax.make_jaxpr(f)(jnp.ones(3))
    assert runs[0] == 2
    calls = [0]

    def by_table(x: jax.Array, table: np.ndarray) -> jax.Array:
        calls[0] += 1
        return x * table[0]

    once = pm.trace_once(by_table, inline=True)
    table = np.array([2.0])  # a NumPy array is a static leaf, and not hashable
    jax.make_jaxpr(lambda x: once(once(x, table), table))(jnp.ones(3))
    assert calls[0] == 2  # both calls ran the function: nothing cached
