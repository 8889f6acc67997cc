"""``adapters.core.partial_eval``: ``lazy_init`` (``flax.core.partial_eval``'s name)."""

from ._apply import lazy_init as lazy_init

__all__ = ["lazy_init"]
