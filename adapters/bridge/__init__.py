"""adapters.bridge: move models between Linen code and pytreemod, both ways, losslessly.

- ``ToLinen`` / ``to_linen``: a pytreemod Module used as a Linen module. Its Variables
  are Linen collections of the same names (boxes kept); ``apply(..., mutable=...)``
  returns the state it wrote.
- ``ToPytreemod`` / ``from_linen``: a Linen module plus its variables as a frozen
  pytreemod Module; calling it equals ``module.apply(variables, ...)``; state writes go
  through ``pm.apply``; ``.to_linen()`` returns ``(module, variables)``.
- ``variable_type(collection)``: the Variable type used for a Linen collection.
- ``NNXToPytreemod`` / ``from_nnx``: an NNX model as a frozen pytreemod Module;
  ``.to_nnx()`` returns the NNX model (same graph, Variable types and metadata).
  ``PytreemodToNNX`` / ``to_nnx``: a pytreemod Module as an NNX Module;
  ``.to_pytreemod()`` returns it. These load ``adapters.nnx`` on first access (PEP 562),
  so the Linen bridge does not import NNX.

See docs/bridge.md.
"""

import importlib as _importlib
import typing as _typing

from ._keys import variable_type as variable_type
from ._to_linen import ToLinen as ToLinen
from ._to_linen import to_linen as to_linen
from ._to_pytreemod import BridgeError as BridgeError
from ._to_pytreemod import ToPytreemod as ToPytreemod
from ._to_pytreemod import from_linen as from_linen

if _typing.TYPE_CHECKING:
    from ._nnx import NNXToPytreemod as NNXToPytreemod
    from ._nnx import PytreemodToNNX as PytreemodToNNX
    from ._nnx import from_nnx as from_nnx
    from ._nnx import to_nnx as to_nnx

_NNX_NAMES = ("NNXToPytreemod", "PytreemodToNNX", "from_nnx", "to_nnx")


def __getattr__(name: str) -> object:
    """The NNX bridge's names, importing ``adapters.nnx`` on first access (PEP 562)."""
    if name not in _NNX_NAMES:
        raise AttributeError(f"module 'adapters.bridge' has no attribute {name!r}")
    return getattr(_importlib.import_module("._nnx", __name__), name)


__all__ = [
    "BridgeError",
    "NNXToPytreemod",
    "PytreemodToNNX",
    "ToLinen",
    "ToPytreemod",
    "from_linen",
    "from_nnx",
    "to_linen",
    "to_nnx",
    "variable_type",
]
