"""flax.nnx.bridge (being written)."""
