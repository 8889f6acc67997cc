"""``adapters.core.nn.normalization``: batch_norm, layer_norm, group_norm on a scope."""

from ._normalization import batch_norm as batch_norm
from ._normalization import group_norm as group_norm
from ._normalization import layer_norm as layer_norm

__all__ = ["batch_norm", "group_norm", "layer_norm"]
