"""pm.jit(trace="all"): jax.jit's argument rule, over modules, with pytreemod's retrace log."""

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.core import Tracer

import pytreemod as pm

_jit: Any = pm.jit  # the trace="all" result is jax.jit's object: .lower, .trace, .eval_shape


class Scale(pm.Module):
    weight: pm.Param

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.weight.value

    def repeat(self, x: jax.Array, times: int) -> jax.Array:
        for _ in range(times):
            x = self(x)
        return x


def _scale() -> Scale:
    return Scale(pm.Param(jnp.full((3,), 2.0, dtype=jnp.float32)))


def test_python_numbers_are_traced_not_constants() -> None:
    seen: list[Any] = []

    @pm.jit(trace="all")
    def f(x: jax.Array, n: float) -> jax.Array:
        seen.append(n)
        return x * n

    np.testing.assert_allclose(f(jnp.ones(2), 3.0), [3.0, 3.0])
    np.testing.assert_allclose(f(jnp.ones(2), 5.0), [5.0, 5.0])
    assert len(seen) == 1  # one trace: the number is an argument, not part of the key
    assert isinstance(seen[0], Tracer)
    # the default rule makes the number static: one trace per value
    g = pm.jit(lambda x, n: x * n)
    g(jnp.ones(2), 3.0)
    assert g(jnp.ones(2), 5.0)[0] == 5.0


def test_static_argnums_and_names_are_constants() -> None:
    calls: list[Any] = []

    def f(x: jax.Array, n: int, *, mode: str = "add") -> jax.Array:
        calls.append((n, mode))
        r = jnp.arange(n, dtype=jnp.float32)
        return r + x if mode == "add" else r * x

    jf = pm.jit(f, trace="all", static_argnums=1, static_argnames="mode")
    np.testing.assert_allclose(jf(jnp.float32(1), 3), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(jf(jnp.float32(2), 2, mode="mul"), [0.0, 2.0])
    assert calls == [(3, "add"), (2, "mul")]


def test_modules_pass_through_and_come_back() -> None:
    model = _scale()

    @pm.jit(trace="all")
    def step(m: Scale, x: jax.Array) -> tuple[Scale, jax.Array]:
        return pm.tree_at(lambda t: t.weight.value, m, m.weight.value + 1.0), m(x)

    new, y = step(model, jnp.ones(3))
    assert isinstance(new, Scale)
    np.testing.assert_allclose(new.weight.value, [3.0, 3.0, 3.0])
    np.testing.assert_allclose(y, [2.0, 2.0, 2.0])


def test_a_module_as_the_function_is_traced_not_baked_in() -> None:
    model = _scale()
    f = _jit(model, trace="all")
    np.testing.assert_allclose(f(jnp.ones(3)), [2.0, 2.0, 2.0])
    text = f.lower(jnp.ones(3)).as_text()
    assert text.count("tensor<3xf32>") >= 2  # the weight is a parameter of the program
    assert f.eval_shape(jnp.ones(3)).shape == (3,)
    jaxpr = f.trace(jnp.ones(3)).jaxpr
    assert len(jaxpr.jaxpr.invars) == 2


def test_module_as_function_static_argnums_count_from_its_own_arguments() -> None:
    f = _jit(_scale().repeat, trace="all", static_argnums=1)
    np.testing.assert_allclose(f(jnp.ones(3), 2), [4.0, 4.0, 4.0])


def test_the_result_is_jax_jit_with_its_stages() -> None:
    f = _jit(lambda x: x + 1, trace="all")
    compiled = f.lower(jnp.ones(2)).compile()
    np.testing.assert_allclose(compiled(jnp.ones(2)), [2.0, 2.0])
    assert f.eval_shape(jnp.ones(2)).shape == (2,)


def test_donation_whole_argument_and_donate_argnames() -> None:
    f = _jit(lambda x, y: x + y, trace="all", donate_argnums=0)
    text = f.lower(jnp.ones(2), jnp.ones(2)).as_text()
    assert "tf.aliasing_output" in text or "jax.buffer_donor" in text
    g = _jit(lambda x, y: x + y, trace="all", donate_argnums=None, donate_argnames="y")
    text = g.lower(jnp.ones(2), jnp.ones(2)).as_text()
    assert "tf.aliasing_output" in text or "jax.buffer_donor" in text
    h = _jit(lambda x, y: x + y, trace="all", donate_argnums=(pm.DonateState(1),))
    assert "tf.aliasing_output" in h.lower(jnp.ones(2), jnp.ones(2)).as_text()


def test_donating_part_of_an_argument_needs_trace_arrays() -> None:
    with pytest.raises(pm.TransformError, match=r"DonateState\(0, .params.\) donates part"):
        pm.jit(lambda m: m, trace="all", donate_argnums=(pm.DonateState(0, "params"),))


def test_unknown_trace_rule_is_an_error() -> None:
    with pytest.raises(pm.TransformError, match='trace must be "arrays" or "all"'):
        pm.jit(lambda x: x, trace="leaves")  # type: ignore[arg-type]


def test_static_argnums_without_trace_all_points_to_it() -> None:
    with pytest.raises(pm.TransformError, match='pass trace="all"'):
        pm.jit(lambda x, n: x, static_argnums=1)


def test_retrace_warning_names_the_changing_argument() -> None:
    f = pm.jit(lambda x: x * 2, trace="all", warn_retraces=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 4):
            f(jnp.ones(n))
    messages = [str(w.message) for w in caught if issubclass(w.category, pm.RetraceWarning)]
    assert len(messages) == 1 and "traced and compiled 3 times" in messages[0]
    assert "float32[1]" in messages[0] or "(1,)" in messages[0]


def test_no_warning_when_turned_off() -> None:
    f = pm.jit(lambda x: x * 2, trace="all", warn_retraces=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in range(1, 13):
            f(jnp.ones(n))


def test_prefix_shardings_as_jax_jit_takes_them() -> None:
    mesh = jax.make_mesh((1,), ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
    f = pm.jit(
        lambda m, x: m(x), trace="all", in_shardings=(sharding, None), out_shardings=sharding
    )
    y = f(_scale(), jnp.ones(3))
    assert y.sharding == sharding
