"""``adapters.core.axes_scan``: the ``broadcast`` marker of ``flax.core.axes_scan``.

``broadcast`` in a lifted scan's ``in_axes`` marks an argument every iteration sees whole.
"""

from ._lifted_axes import broadcast as broadcast

__all__ = ["broadcast"]
