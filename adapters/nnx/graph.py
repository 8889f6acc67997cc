"""``flax.nnx.graph``: Flax's older name of the graph module (``graphlib``'s API)."""

from .graphlib import *  # noqa: F403
