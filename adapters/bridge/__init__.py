"""adapters.bridge: move models between Linen code and pytreemod, both ways, losslessly.

- ``ToLinen`` / ``to_linen``: a pytreemod Module used as a Linen module. Its Variables
  are Linen collections of the same names (boxes kept); ``apply(..., mutable=...)``
  returns the state it wrote.
- ``ToPytreemod`` / ``from_linen``: a Linen module plus its variables as a frozen
  pytreemod Module; calling it equals ``module.apply(variables, ...)``; state writes go
  through ``pm.apply``; ``.to_linen()`` returns ``(module, variables)``.
- ``variable_type(collection)``: the Variable type used for a Linen collection.

See docs/bridge.md.
"""

from ._keys import variable_type as variable_type
from ._to_linen import ToLinen as ToLinen
from ._to_linen import to_linen as to_linen
from ._to_pytreemod import BridgeError as BridgeError
from ._to_pytreemod import ToPytreemod as ToPytreemod
from ._to_pytreemod import from_linen as from_linen

__all__ = ["BridgeError", "ToLinen", "ToPytreemod", "from_linen", "to_linen", "variable_type"]
