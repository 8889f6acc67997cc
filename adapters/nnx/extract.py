"""flax.nnx.extract (being written)."""
