"""NNX transforms as pytreemod transforms plus the graph's split/merge: pmap's static and
donated arguments, numbers traced as JAX traces them, Variable metadata kept across
pm.eval_shape / pm.cond / pm.value_and_grad, and scan traced once per structure."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx


def _model(lib: Any) -> Any:
    class M(lib.Module):
        def __init__(self) -> None:
            self.w = lib.Param(jnp.ones((1, 2)))
            self.n = lib.BatchStat(jnp.zeros((1,)))

    return M()


def _step(m: Any, x: jax.Array, mode: str) -> jax.Array:
    m.n[...] += 1
    return m.w[...] * x if mode == "mul" else m.w[...] + x


@pytest.mark.parametrize("donate", [(), (0,)])
@pytest.mark.parametrize("mode", ["mul", "add"])
def test_pmap_static_and_donated_arguments_match_flax(mode: str, donate: tuple[int, ...]):
    results = []
    for lib in (fnnx, nnx):
        m = _model(lib)
        f = lib.pmap(
            _step, in_axes=(0, 0, None), static_broadcasted_argnums=2, donate_argnums=donate
        )
        out = f(m, jnp.full((1, 2), 3.0), mode)
        results.append((np.asarray(out), np.asarray(m.n[...]), np.asarray(m.w[...])))
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_array_equal(ours, theirs)


def test_pmap_static_argument_reaches_the_function_untraced():
    seen: list[Any] = []

    def f(x: jax.Array, table: tuple[int, ...]) -> jax.Array:
        seen.append(table)
        return x * len(table)

    out = nnx.pmap(f, static_broadcasted_argnums=1)(jnp.ones((1, 2)), (1, 2, 3))
    np.testing.assert_array_equal(out, [[3.0, 3.0]])
    assert seen == [(1, 2, 3)]


def test_pmap_rejects_a_static_donated_argument():
    with pytest.raises(ValueError, match="both in static_broadcasted_argnums and donate_argnums"):
        nnx.pmap(_step, static_broadcasted_argnums=2, donate_argnums=2)


def test_numbers_are_traced_as_in_jax():
    # A branch returning a constant, a loop counting down a float.
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    out = nnx.cond(jnp.array(True), lambda m: 1.0, lambda m: 2.0, m)
    assert isinstance(out, jax.Array) and float(out) == 1.0
    _, n = nnx.while_loop(lambda s: s[1] > 0, lambda s: (s[0], s[1] - 1.0), (m, 3.0))
    assert float(n) == 0.0
    assert nnx.fori_loop(0, 3, lambda i, c: c + i, 0.5) == 3.5


def test_variable_metadata_survives_eval_shape_and_cond():
    rngs = nnx.Rngs(dropout=1)
    abstract = nnx.eval_shape(lambda: nnx.Dropout(0.1, rngs=nnx.clone(rngs)))
    assert abstract.rngs.key.get_metadata()["tag"] == "dropout"
    m = nnx.Dropout(0.1, rngs=rngs)
    nnx.cond(jnp.array(True), lambda m: None, lambda m: None, m)
    assert m.rngs.key.get_metadata()["tag"] == "dropout"


def test_grad_in_tree_mode_keeps_variable_metadata():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    m.kernel.set_metadata("note", "kept")
    grads = nnx.grad(lambda m: m(jnp.ones((1, 2))).sum(), graph=False)(m)
    assert grads.kernel.get_metadata()["note"] == "kept"
    np.testing.assert_allclose(grads.kernel[...], np.ones((2, 1)))


def test_scan_is_traced_once_per_structure():
    traces: list[int] = []

    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def step(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        traces.append(1)
        return c + x, c

    results = [step(jnp.zeros(()), jnp.arange(3.0))[0] for _ in range(3)]
    assert [float(c) for c in results] == [3.0, 3.0, 3.0] and len(traces) == 1


def test_vjp_and_jvp_structure_errors():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    _, vjp_fn = nnx.vjp(lambda m, x: m(x), m, jnp.ones(2), graph=False)
    with pytest.raises(TypeError, match="Tree structure of cotangent input"):
        vjp_fn((jnp.ones(2), jnp.ones(2)))
    with pytest.raises(TypeError, match="must have the same tree structure"):
        nnx.jvp(lambda x: x, (jnp.ones(2),), ((jnp.ones(2), 1.0),), graph=False)
