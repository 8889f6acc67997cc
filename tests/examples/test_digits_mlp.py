"""The digits example trains end to end (few epochs, no plot) under strict JAX promotion."""

import importlib.util
import pathlib
import types

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "digits_mlp.py"


def _load_example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("digits_mlp", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_mlp_learns(capsys: pytest.CaptureFixture[str]) -> None:
    example = _load_example()
    # optax.adam's bias correction computes `python_float ** int32_count`, which the
    # conftest's strict dtype promotion rejects; the example itself is promotion-clean
    # (rank promotion stays "raise").
    with jax.numpy_dtype_promotion("standard"):
        accuracy = example.main(["--epochs", "3", "--no-plot", "--seed", "0"])
    assert isinstance(accuracy, float)
    # Chance is 0.1 on ten classes; three epochs reach about 0.93.
    assert accuracy > 0.85
    out = capsys.readouterr().out
    assert "test accuracy" in out
    assert "constants" in out  # the partition left the constants out of training


def test_digits_mlp_partition_keeps_constants_out_of_params() -> None:
    example = _load_example()
    model = example.MLP([64, 8, 10], mean=jnp.zeros(64), std=jnp.ones(64), key=jax.random.key(0))
    structure, params, rest = pm.partition(model, "params")
    assert set(params) == {"layers"}
    assert set(rest) == {"mean", "std"}
    assert pm.to_variables(model).keys() == {"params", "constants"}
    rebuilt = pm.combine(structure, params, rest)
    assert rebuilt == model
    assert example.Constant.collection == "constants"
