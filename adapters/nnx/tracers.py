"""flax.nnx.tracers (being written)."""
