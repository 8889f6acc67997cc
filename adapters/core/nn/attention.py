"""``adapters.core.nn.attention``: (multi-head) dot-product attention on a scope."""

from ._attention import dot_product_attention as dot_product_attention
from ._attention import multi_head_dot_product_attention as multi_head_dot_product_attention

__all__ = ["dot_product_attention", "multi_head_dot_product_attention"]
