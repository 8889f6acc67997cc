"""flax.nnx.compat (being written)."""
