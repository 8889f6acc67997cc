"""``adapters.jax_utils.scan_in_dim`` against ``flax.jax_utils`` and a Python loop."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters import jax_utils


def _body(c: jax.Array, x: jax.Array) -> tuple[jax.Array, Any]:
    return c + x.sum(), {"double": 2 * x, "cumulative": c + x}


@pytest.mark.parametrize(
    ("axis", "keepdims"), [(0, False), (1, False), ((1, 2), False), ((2, 0), True), (1, True)]
)
def test_scan_in_dim_matches_flax(axis: Any, keepdims: bool) -> None:
    ref = pytest.importorskip("flax.jax_utils")
    xs = jnp.arange(24.0).reshape(2, 3, 4)
    ours = jax_utils.scan_in_dim(_body, jnp.float32(0), xs, axis=axis, keepdims=keepdims)
    theirs = ref.scan_in_dim(_body, jnp.float32(0), xs, axis=axis, keepdims=keepdims)
    jax.tree.map(np.testing.assert_array_equal, ours, theirs)


def test_scan_in_dim_is_a_loop_over_the_axis() -> None:
    xs = jnp.arange(6.0).reshape(2, 3)
    total, ys = jax_utils.scan_in_dim(lambda c, x: (c + x, c), jnp.zeros(2), xs, axis=1, unroll=2)
    np.testing.assert_array_equal(total, xs.sum(1))
    np.testing.assert_array_equal(ys, jnp.cumsum(xs, 1) - xs)


def test_replicate_and_unreplicate() -> None:
    tree = {"w": jnp.ones(3)}
    replicated = jax_utils.replicate(tree)
    assert replicated["w"].shape == (jax.local_device_count(), 3)
    np.testing.assert_array_equal(jax_utils.unreplicate(replicated)["w"], tree["w"])
