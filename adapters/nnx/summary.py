"""flax.nnx.summary (being written)."""
