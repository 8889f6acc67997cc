"""flax.nnx.pytreelib (being written)."""
