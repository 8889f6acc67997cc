"""The Linen ResNet example trains end to end, and its source means the same under Flax.

The example's model is plain Linen code importing ``adapters.linen``. Loading the same
file with the import pointed at ``flax.linen`` must give the same variable tree (names,
shapes, dtypes), and our ``apply`` on Flax's variables the same logits and batch
statistics as Flax's.
"""

import importlib.util
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "linen_resnet.py"


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(EXAMPLE)
    sys.modules[name] = module  # dataclasses look their module up while building classes
    try:
        exec(compile(source, str(EXAMPLE), "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def _ours() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("linen_resnet", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flax() -> types.ModuleType:
    source = EXAMPLE.read_text()
    line = "from adapters import linen as nn"
    assert line in source
    return _load(source.replace(line, "from flax import linen as nn"), "linen_resnet_flax")


def test_linen_resnet_learns(capsys: pytest.CaptureFixture[str]) -> None:
    example = _ours()
    # optax.adam's bias correction mixes a Python float and an int32 count, which the
    # conftest's strict dtype promotion rejects; the model itself is promotion-clean.
    with jax.numpy_dtype_promotion("standard"):
        accuracy = example.main(["--epochs", "2", "--width", "8", "--no-plot"])
    # Chance is 0.1; two epochs of the width-8 net reach about 0.9.
    assert accuracy > 0.7
    out = capsys.readouterr().out
    assert "test accuracy" in out
    assert "stem, BatchNorm_0, ResidualBlock_0, ResidualBlock_1, Dense_0" in out


def test_linen_resnet_same_variables_and_outputs_as_flax() -> None:
    ours, theirs = _ours(), _flax()
    x = jnp.asarray(np.random.default_rng(0).uniform(size=(4, 8, 8, 1)), jnp.float32)
    key = jax.random.key(0)
    v_ours = ours.ResNet(width=8).init(key, x)
    v_flax = theirs.ResNet(width=8).init(key, x)
    shapes = lambda v: jax.tree.map(lambda a: (a.shape, a.dtype), jax.tree.map(jnp.asarray, v))
    assert shapes(dict(v_ours)) == shapes(dict(v_flax))

    v_flax = jax.tree.map(jnp.asarray, dict(v_flax))
    rngs = {"dropout": jax.random.key(1)}
    kwargs = dict(train=True, mutable=["batch_stats"])
    out_ours, upd_ours = ours.ResNet(width=8, dropout_rate=0.0).apply(v_flax, x, **kwargs)
    out_flax, upd_flax = theirs.ResNet(width=8, dropout_rate=0.0).apply(v_flax, x, **kwargs)
    np.testing.assert_allclose(out_ours, out_flax, rtol=1e-4, atol=1e-5)
    for a, b in zip(jax.tree.leaves(upd_ours), jax.tree.leaves(upd_flax), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    eval_ours = ours.ResNet(width=8).apply(v_flax, x, rngs=rngs)
    eval_flax = theirs.ResNet(width=8).apply(v_flax, x, rngs=rngs)
    np.testing.assert_allclose(eval_ours, eval_flax, rtol=1e-4, atol=1e-5)
