"""pm.jit's recognition of arguments (the fast path) never changes what a call means.

Random sequences of calls mix fresh models, the previous call's outputs, a module passed
twice and modules tying a Variable of another; every call must equal the un-jitted
function and keep exactly the ties its arguments had.
"""

from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings

import pytreemod as pm


class Pair(pm.Module):
    a: pm.Param
    b: pm.Param


def _f(x: Pair, y: Pair) -> tuple[Pair, Pair, Any]:
    total = x.a.value + 2 * x.b.value + 3 * y.a.value + 4 * y.b.value
    bump = pm.Param(x.a.value + 1.0)
    return pm.replace(x, a=bump), y, total


def _params(p: Pair) -> list[pm.Param]:
    return [p.a, p.b]


def _ties(x: Pair, y: Pair) -> set[tuple[int, int]]:
    """Which (x position, y position) pairs hold one Variable object."""
    return {(i, j) for i, u in enumerate(_params(x)) for j, v in enumerate(_params(y)) if u is v}


# One step: how to choose each argument. "new": a fresh Pair; "last": from the previous
# output; "same": the other argument itself; "tie": a fresh Pair sharing one Variable
# with the other argument.
choice = st.sampled_from(["new", "last", "same", "tie"])


@given(st.lists(st.tuples(choice, choice), min_size=1, max_size=8), st.integers(0, 3))
@settings(max_examples=40, deadline=None)
def test_fast_path_calls_equal_plain_calls(steps: list[tuple[str, str]], seed: int) -> None:
    f = pm.jit(_f)
    counter = [seed * 100]

    def fresh() -> Pair:
        counter[0] += 1
        return Pair(pm.Param(jnp.full(2, float(counter[0]))), pm.Param(jnp.arange(2.0)))

    last: tuple[Pair, Pair] = (fresh(), fresh())
    for kx, ky in steps:
        x = last[0] if kx == "last" else fresh()
        if ky == "same":
            y = x
        elif ky == "tie":
            y = Pair(x.b, pm.Param(jnp.ones(2)))
        elif ky == "last":
            y = last[1]
        else:
            y = fresh()
        ox, oy, total = f(x, y)
        ex, ey, etotal = _f(x, y)
        np.testing.assert_allclose(total, etotal, rtol=1e-6)
        for got, want in zip(_params(ox) + _params(oy), _params(ex) + _params(ey)):
            np.testing.assert_allclose(got.value, want.value, rtol=1e-6)
        # The output's ties are the inputs' ties (x.a is replaced, so it ties nothing).
        want_ties = {(i, j) for i, j in _ties(x, y) if i != 0}
        assert _ties(ox, oy) == want_ties
        last = (ox, oy)


# Containers of arrays: dicts (keys inserted in any order; flattening sorts them), lists,
# tuples and None, nested, with a module beside them.
_keys = st.one_of(st.sampled_from(["w", "b", "a", "z"]), st.integers(0, 3))
_trees = st.recursive(
    st.just("leaf") | st.none(),
    lambda children: st.one_of(
        st.dictionaries(_keys.map(str), children, max_size=4),
        st.dictionaries(st.integers(0, 5), children, max_size=4),
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
    ),
    max_leaves=12,
)


def _fill(shape: Any, start: float) -> Any:
    """``shape`` with a distinct array at each "leaf" (in flattening order)."""
    leaves, treedef = jax.tree.flatten(shape)
    return jax.tree.unflatten(treedef, [jnp.full(2, start + i) for i in range(len(leaves))])


@given(_trees, st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_fast_path_reads_every_array_of_a_container(shape: Any, calls: int) -> None:
    # Every leaf is weighted by its position, so an array read from the wrong place (or a
    # stale one) changes the result.
    def weigh(model: Pair, tree: Any) -> Any:
        leaves = jax.tree.leaves(tree)
        total = sum((i + 1.0) * x for i, x in enumerate(leaves))
        return model.a.value * 0 + total, jax.tree.map(lambda x: x * 2, tree)

    f = pm.jit(weigh)
    model = Pair(pm.Param(jnp.zeros(2)), pm.Param(jnp.ones(2)))
    for call in range(calls + 1):  # the first call is checked, later ones recognised
        tree = _fill(shape, 10.0 * call)
        total, doubled = f(model, tree)
        want_total, want_doubled = weigh(model, tree)
        np.testing.assert_allclose(total, want_total)
        assert jax.tree.structure(doubled) == jax.tree.structure(want_doubled)
        for got, want in zip(jax.tree.leaves(doubled), jax.tree.leaves(want_doubled)):
            np.testing.assert_allclose(got, want)
