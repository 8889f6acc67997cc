"""Shared test configuration: strict JAX promotion rules and a key fixture."""

import itertools
import os
from collections.abc import Callable

from tests.xla_env import xla_flags

# Eight simulated CPU devices for the sharding tests, and XLA's LLVM back end at -O0:
# must be set before JAX starts. See tests.xla_env.xla_flags.
os.environ["XLA_FLAGS"] = xla_flags(8, os.environ.get("XLA_FLAGS", ""))

import jax
import pytest
from hypothesis import settings

# `make test` (and CI) replays the same examples on every run: a law that fails must fail
# for everyone who runs the suite, not on one run in fifty. To explore new examples, run
# with HYPOTHESIS_PROFILE=explore (a fresh random seed per run, more examples).
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey() -> Callable[[], jax.Array]:
    """Return a function giving a fresh, deterministic PRNG key on each call."""
    counter = itertools.count()
    return lambda: jax.random.key(next(counter))
