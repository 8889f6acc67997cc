"""``adapters.core.nn.linear``: dense, dense_general, conv, conv_transpose, embedding."""

from ._linear import Embedding as Embedding
from ._linear import conv as conv
from ._linear import conv_transpose as conv_transpose
from ._linear import default_embed_init as default_embed_init
from ._linear import default_kernel_init as default_kernel_init
from ._linear import dense as dense
from ._linear import dense_general as dense_general
from ._linear import embedding as embedding

__all__ = [
    "Embedding",
    "conv",
    "conv_transpose",
    "default_embed_init",
    "default_kernel_init",
    "dense",
    "dense_general",
    "embedding",
]
