"""benchmarks/gpu.py stays ready for a GPU run: its tiny configuration runs on the CPU,
the four implementations of the train step agree on the loss, and the measurement
reports every figure it prints."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from benchmarks import gpu

FIGURES = {"compile_s", "loss", "step_ms", "dispatch_us", "idle_us"}


@pytest.fixture(autouse=True)
def _default_promotion() -> Any:
    # JAX's default promotion, as users run it: Flax's LayerNorm mixes bf16 and f32 and
    # the raw-JAX step broadcasts biases over the leading axes.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def test_tiny_transformer_step_agrees_across_implementations() -> None:
    # One block: each implementation's step compiles in about 2 s on the CPU.
    losses = gpu.first_losses(dataclasses.replace(gpu.TINY, layers=1))
    assert set(losses) == {"pytreemod", "adapters.linen", "flax.linen", "raw JAX"}
    reference = losses["raw JAX"]
    assert np.isfinite(reference) and reference > 0
    for name, loss in losses.items():  # bf16 activations: agreement to bf16 precision
        np.testing.assert_allclose(loss, reference, rtol=2e-2, err_msg=name)


def _cheap_contestants(cfg: gpu.Config) -> Any:
    """Two tiny steps in place of the transformer (the measurement is under test, not
    the model) and one that fails."""

    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        return params * 0.5, opt_state, gpu._loss(x * params, y)

    def broken_step(*args: Any) -> Any:
        raise RuntimeError("no kernel for this shape")

    x, y, params = jnp.ones((2, 3)), jnp.zeros((2, 3)), jnp.float32(2.0)
    runs = {
        "raw JAX": (lambda: jax.jit(step), params, ()),
        "pytreemod": (lambda: pm.jit(step), params, ()),
        "broken": (lambda: broken_step, None, None),
    }
    return runs, x, y


def test_measurement_reports_every_figure_and_a_failing_contestant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu, "contestants", _cheap_contestants)
    # Each contestant's compile starts from cleared caches; clearing them here would make
    # every later test in this process compile its programs again.
    monkeypatch.setattr(jax, "clear_caches", lambda: None)
    result = gpu.measure(gpu.TINY, steps=2, rounds=2)
    assert set(result) == {"raw JAX", "pytreemod"}  # one failure hides no other number
    for name, figures in result.items():
        assert set(figures) == FIGURES and all(v > 0 for v in figures.values()), name
        np.testing.assert_allclose(figures["loss"], 4.0)  # the first step's: mean((2 * 1)^2)
    assert "broken failed: RuntimeError: no kernel for this shape" in capsys.readouterr().out


def test_a_failing_raw_step_leaves_the_others_measured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_step(*args: Any) -> Any:
        raise RuntimeError()  # no message at all

    def contestants(cfg: gpu.Config) -> Any:
        runs, x, y = _cheap_contestants(cfg)
        return {"raw JAX": (lambda: broken_step, None, None), "pytreemod": runs["pytreemod"]}, x, y

    monkeypatch.setattr(gpu, "contestants", contestants)
    monkeypatch.setattr(jax, "clear_caches", lambda: None)
    assert set(gpu.measure(gpu.TINY, steps=1, rounds=1)) == {"pytreemod"}
    assert "raw JAX failed: RuntimeError: " in capsys.readouterr().out


def test_attention_uses_cudnn_only_on_a_gpu() -> None:
    expected = "cudnn" if jax.default_backend() == "gpu" else None
    assert gpu.attention_impl() == expected
