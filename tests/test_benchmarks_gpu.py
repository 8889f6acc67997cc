"""benchmarks/gpu.py stays ready for a GPU run: its tiny configuration runs on the CPU and
the four implementations of the train step agree on the loss."""

import jax
import numpy as np

from benchmarks import gpu


def test_tiny_transformer_step_agrees_across_implementations() -> None:
    # JAX's default promotion, as users run it: Flax's LayerNorm mixes bf16 and f32 and
    # the raw-JAX step broadcasts biases over the leading axes.
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        losses = gpu.first_losses(gpu.TINY)
    assert set(losses) == {"pytreemod", "adapters.linen", "flax.linen", "raw JAX"}
    reference = losses["raw JAX"]
    assert np.isfinite(reference) and reference > 0
    for name, loss in losses.items():  # bf16 activations: agreement to bf16 precision
        np.testing.assert_allclose(loss, reference, rtol=2e-2, err_msg=name)


def test_attention_uses_cudnn_only_on_a_gpu() -> None:
    expected = "cudnn" if jax.default_backend() == "gpu" else None
    assert gpu.attention_impl() == expected
