"""``flax.nnx.nn``: NNX's layers, activations and initializers."""
