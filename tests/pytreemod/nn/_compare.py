"""Helpers for comparing pytreemod layers with plain-JAX references and Flax Linen.

Tests run layers, references and Flax under ``jit``: one compilation per function
instead of one per primitive and shape in eager mode, which keeps the suite fast.
"""

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm

TOL = 1e-5  # float32 tolerance against Flax Linen given the same parameters
T = TypeVar("T")


def randn(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard normal float32 array drawn by NumPy, seeded from ``key``.

    Like ``jax.random.normal(key, shape)`` but without compiling a sampler for each shape.
    """
    return jnp.asarray(np.random.default_rng(_seed(key)).standard_normal(shape), jnp.float32)


def _seed(key: jax.Array) -> int:
    return int(np.asarray(jax.random.key_data(key)).ravel()[-1])


def linen() -> Any:
    """``flax.linen``, or skip the test where the ``compare`` extra is not installed."""
    return pytest.importorskip("flax.linen")


@contextlib.contextmanager
def standard_promotion() -> Iterator[None]:
    """Flax is written for JAX's default promotion rules, not the suite's strict ones."""
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def make(build: Callable[..., T], *args: Any, key: jax.Array, **kwargs: Any) -> T:
    """``build(*args, key=key, **kwargs)`` with random parameters drawn by NumPy.

    The structure comes from ``jax.eval_shape`` of the real constructor; the values are
    normal draws (scale 0.5; variances positive), seeded from ``key``. Numerics tests need
    parameters, not the initializers (tested on their own), and this skips compiling an
    initializer for every parameter shape.
    """
    abstract = jax.eval_shape(lambda k: build(*args, key=k, **kwargs), key)
    rng = np.random.default_rng(_seed(key) + 1_000_003)

    def fill(path: tuple[Any, ...], leaf: jax.ShapeDtypeStruct) -> jax.Array:
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            return jnp.zeros(leaf.shape, leaf.dtype)
        value = 0.5 * rng.standard_normal(leaf.shape)
        if any(getattr(k, "name", None) == "var" for k in path):
            value = np.abs(value) + 0.5
        return jnp.asarray(value, leaf.dtype)

    return jax.tree_util.tree_map_with_path(fill, abstract)


def jcall(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` under ``pm.jit`` (a layer's arrays are traced too)."""
    return pm.jit(fn)(*args, **kwargs)


def run_linen(module: Any, variables: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """``module.apply(variables, *args, **kwargs)`` under jit with standard promotion."""
    with standard_promotion():
        return jax.jit(lambda v, *a: module.apply(v, *a, **kwargs))(variables, *args)


def close(a: Any, b: Any, tol: float = TOL) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)
