"""pm.jit's recognition of arguments (the fast path) never changes what a call means.

Random sequences of calls mix fresh models, the previous call's outputs, a module passed
twice and modules tying a Variable of another; every call must equal the un-jitted
function and keep exactly the ties its arguments had.
"""

from typing import Any

import hypothesis.strategies as st
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
