"""flax.nnx.helpers (being written)."""
