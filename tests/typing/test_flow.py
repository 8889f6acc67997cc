"""Run the typing checks of ``flow.py`` (pyright checks them; this runs them)."""

import jax.numpy as jnp

from . import flow


def test_flow_functions_run() -> None:
    rebuilt = flow.partition_and_combine()
    assert rebuilt == rebuilt and isinstance(rebuilt, flow.Stats)
    trained = flow.documented_train_step()
    assert isinstance(trained, flow.Stats)
    # One sgd step on sum((w * x) ** 2) with w = 1, x = (0, 1, 2): w - 0.1 * 2 * x**2.
    assert jnp.allclose(trained.weight.value, jnp.array([1.0, 0.8, 0.2]))
    flow.gradients()
    flow.transforms()
    flow.updates()
