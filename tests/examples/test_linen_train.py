"""The Linen training example runs end to end: trains, saves a checkpoint every epoch,
restores the newest into a fresh state after a simulated restart and trains on. Its model
source means the same under Flax (same variable tree)."""

import importlib.util
import os
import pathlib
import types
from typing import Any

import flax.linen
import jax
import jax.numpy as jnp
import pytest

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "linen_train.py"


@pytest.fixture
def standard_promotion() -> Any:
    with jax.numpy_dtype_promotion("standard"):  # pooling divides by an int window size
        yield


def _ours() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("linen_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_imports_are_the_only_difference_from_flax() -> None:
    source = EXAMPLE.read_text()
    assert "from adapters import linen as nn\n" in source
    assert "from adapters.training import checkpoints, train_state\n" in source
    imports = [line for line in source.splitlines() if line.startswith("from adapters")]
    assert len(imports) == 2


def test_trains_checkpoints_restores_and_continues(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _ours()
    argv = ["--epochs", "2", "--resume-epochs", "1", "--width", "4", "--batch-size", "64"]
    argv += ["--ckpt-dir", str(tmp_path), "--keep", "2", "--no-plot"]
    with jax.numpy_dtype_promotion("standard"):  # adam mixes an int32 count and floats
        accuracy = example.main(argv)
    assert accuracy > 0.5  # chance is 0.1; three tiny epochs reach about 0.8
    out = capsys.readouterr().out
    steps_per_epoch = 1437 // 64
    assert f"restored step {2 * steps_per_epoch} from" in out
    assert f"after {3 * steps_per_epoch} steps" in out
    # keep=2: the checkpoints of the last two epochs remain.
    assert sorted(os.listdir(tmp_path)) == [
        f"checkpoint_{2 * steps_per_epoch}",
        f"checkpoint_{3 * steps_per_epoch}",
    ]


@pytest.mark.usefixtures("standard_promotion")
def test_model_has_flax_variable_tree() -> None:
    example = _ours()
    x = jnp.ones((1, 8, 8, 1))
    # jit: one compiled program instead of an eager compile per initializer op.
    ours = jax.jit(example.CNN(features=(4, 8)).init, static_argnames="train")(
        jax.random.key(0), x, train=False
    )

    class FlaxCNN(flax.linen.Module):  # the example's CNN, written against flax.linen
        @flax.linen.compact
        def __call__(self, x: jax.Array, train: bool) -> jax.Array:
            for features in (4, 8):
                x = flax.linen.Conv(features, (3, 3))(x)
                x = flax.linen.BatchNorm(use_running_average=not train, momentum=0.9)(x)
                x = flax.linen.avg_pool(flax.linen.relu(x), (2, 2), strides=(2, 2))
            x = flax.linen.relu(flax.linen.Dense(128)(x.reshape((x.shape[0], -1))))
            return flax.linen.Dense(10)(x)

    theirs = jax.jit(FlaxCNN().init, static_argnames="train")(jax.random.key(0), x, train=False)
    shapes = lambda v: jax.tree.map(lambda a: (a.shape, a.dtype), dict(v))
    assert shapes(ours) == shapes(theirs)
    for a, b in zip(jax.tree.leaves(dict(ours)), jax.tree.leaves(dict(theirs)), strict=True):
        assert jnp.array_equal(a, b)  # same initial values from the same key
