"""flax.nnx.spmd (being written)."""
