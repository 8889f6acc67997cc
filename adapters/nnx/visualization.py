"""flax.nnx.visualization (being written)."""
