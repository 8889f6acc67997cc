"""Shared test configuration: strict JAX promotion rules and a key fixture."""

import atexit
import itertools
import os
import shutil
import tempfile
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

# XLA's persistent compilation cache, one per test process and removed at its exit: tests
# compile the same programs again and again (a training loop built afresh per test, a model
# compared under two libraries, a page of docs rebuilding a step), and a hit skips XLA's
# compilation (tracing and lowering still run, so retrace checks see every trace). Each
# process has its own folder: JAX's cache writes its files without a lock.
_XLA_CACHE = tempfile.mkdtemp(prefix="pytreemod-tests-xla-")
atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _XLA_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey() -> Callable[[], jax.Array]:
    """Return a function giving a fresh, deterministic PRNG key on each call."""
    counter = itertools.count()
    return lambda: jax.random.key(next(counter))
