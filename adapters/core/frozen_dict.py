"""``adapters.core.frozen_dict``: ``FrozenDict`` and its helpers (``flax.core.frozen_dict``)."""

from ._frozen_dict import FrozenDict as FrozenDict
from ._frozen_dict import copy as copy
from ._frozen_dict import freeze as freeze
from ._frozen_dict import pop as pop
from ._frozen_dict import pretty_repr as pretty_repr
from ._frozen_dict import unfreeze as unfreeze

__all__ = ["FrozenDict", "copy", "freeze", "pop", "pretty_repr", "unfreeze"]
