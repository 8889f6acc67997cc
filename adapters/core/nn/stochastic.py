"""``adapters.core.nn.stochastic``: dropout on a scope."""

from ._stochastic import dropout as dropout

__all__ = ["dropout"]
