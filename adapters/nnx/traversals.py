"""flax.nnx.traversals (being written)."""
