"""adapters: Flax's functional core (``adapters.core``) and Linen rebuilt over pytreemod.

Top-level names as ``flax``'s: ``config`` (the flags), ``core``, ``errors``, ``ids``,
``jax_utils``, ``linen``, ``nnx`` (a subset of ``flax.nnx``), ``serialization``, ``struct``,
``traverse_util``, ``typing``.

Each subpackage is imported when first read (PEP 562 ``__getattr__``), so ``import
adapters.linen`` imports Linen and what it uses, not ``nnx``, ``serialization`` (msgpack)
or the others. Type checkers read the names from the ``TYPE_CHECKING`` block.
"""

import importlib as _importlib
import typing as _typing

from pytreemod import __version__ as __version__

_SUBMODULES = (
    "config",
    "core",
    "errors",
    "ids",
    "jax_utils",
    "linen",
    "nnx",
    "serialization",
    "struct",
    "traverse_util",
    "typing",
)

if _typing.TYPE_CHECKING:
    from . import config as config
    from . import core as core
    from . import errors as errors
    from . import ids as ids
    from . import jax_utils as jax_utils
    from . import linen as linen
    from . import nnx as nnx
    from . import serialization as serialization
    from . import struct as struct
    from . import traverse_util as traverse_util
    from . import typing as typing


def __getattr__(name: str) -> object:
    """Import a subpackage on first access (PEP 562)."""
    if name not in _SUBMODULES:
        raise AttributeError(f"module 'adapters' has no attribute {name!r}")
    return _importlib.import_module(f".{name}", __name__)


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULES})
