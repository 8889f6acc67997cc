"""``adapters.errors``: the exception classes, under ``flax.errors``' names and texts.

The classes are defined in ``adapters.core`` (the lowest layer that raises them); this
module re-exports ``adapters.core.errors``, so both names give the same class objects.
"""

from .core.errors import *  # noqa: F403 (the same public names, listed once there)
from .core.errors import __all__ as __all__
