"""``adapters.core.variables``: variable dicts (``flax.core.variables``).

A variable dict maps collection names (``"params"``, ``"batch_stats"``...) to nested
dicts of arrays; the collections share the module tree's structure.
"""

from ._scope import Variable as Variable

__all__ = ["Variable"]
