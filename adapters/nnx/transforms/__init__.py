"""``flax.nnx.transforms``: NNX's JAX-style transforms over object graphs."""
