"""flax.nnx.reprlib (being written)."""
