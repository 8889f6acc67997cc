"""Helpers for comparing pytreemod layers with plain-JAX references and Flax Linen.

Tests run layers, references and Flax under ``jit``: one compilation per function
instead of one per primitive and shape in eager mode, which keeps the suite fast.
"""

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import numpy as np
import pytest

import pytreemod as pm

TOL = 1e-5  # float32 tolerance against Flax Linen given the same parameters
T = TypeVar("T")


def linen() -> Any:
    """``flax.linen``, or skip the test where the ``compare`` extra is not installed."""
    return pytest.importorskip("flax.linen")


@contextlib.contextmanager
def standard_promotion() -> Iterator[None]:
    """Flax is written for JAX's default promotion rules, not the suite's strict ones."""
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def make(build: Callable[..., T], *args: Any, key: jax.Array, **kwargs: Any) -> T:
    """``build(*args, key=key, **kwargs)`` compiled as one program (initialisation)."""
    return pm.jit(lambda k: build(*args, key=k, **kwargs))(key)


def jcall(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` under ``pm.jit`` (a layer's arrays are traced too)."""
    return pm.jit(fn)(*args, **kwargs)


def run_linen(module: Any, variables: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """``module.apply(variables, *args, **kwargs)`` under jit with standard promotion."""
    with standard_promotion():
        return jax.jit(lambda v, *a: module.apply(v, *a, **kwargs))(variables, *args)


def close(a: Any, b: Any, tol: float = TOL) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)
