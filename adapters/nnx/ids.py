"""flax.nnx.ids (being written)."""
