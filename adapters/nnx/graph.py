"""flax.nnx.graph (being written)."""
