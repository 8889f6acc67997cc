"""Checked calls leave Python's ``random`` stream alone: a program that shuffles its data
with ``random`` gets the same order whether or not its layers' arguments are checked."""

import random

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F


def test_a_checked_call_with_a_container_argument_draws_nothing_from_random() -> None:
    key = jax.random.key(0)
    F.dropout(jnp.ones((2, 3)), 0.5, key, broadcast_dims=(0,))  # build the checker first
    random.seed(1234)
    expected = [random.random() for _ in range(3)]
    random.seed(1234)
    for dims in [(0,), (1,), ()]:
        F.dropout(jnp.ones((2, 3)), 0.5, key, broadcast_dims=dims)
    assert [random.random() for _ in range(3)] == expected
