"""Shared test configuration: strict JAX promotion rules and a key fixture."""

import itertools
from collections.abc import Callable

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey() -> Callable[[], jax.Array]:
    """Return a function giving a fresh, deterministic PRNG key on each call."""
    counter = itertools.count()
    return lambda: jax.random.key(next(counter))
