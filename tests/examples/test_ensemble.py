"""The ensemble example trains every member well above chance in a few steps."""

import importlib.util
import pathlib
import sys

import jax

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "ensemble.py"


def test_ensemble_members_learn() -> None:
    spec = importlib.util.spec_from_file_location("ensemble_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ensemble_example"] = module
    spec.loader.exec_module(module)
    # Examples are user code: they broadcast biases the usual way.
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        accuracies = module.main(["--members", "3", "--steps", "150"])
    assert len(accuracies) == 3
    assert min(accuracies) > 0.85
    assert len(set(accuracies)) > 1 or accuracies[0] > 0.9  # members differ or all learn
