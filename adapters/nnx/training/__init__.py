"""``flax.nnx.training``: optimizer, metrics and EMA for NNX models."""
