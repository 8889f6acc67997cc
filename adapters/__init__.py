"""adapters: Flax's functional core (``adapters.core``) and Linen rebuilt over pytreemod.

Top-level names as ``flax``'s: ``config`` (the flags), ``core``, ``errors``, ``ids``,
``jax_utils``, ``linen``, ``nnx`` (a subset of ``flax.nnx``), ``serialization``, ``struct``,
``traverse_util``, ``typing``.
"""

from pytreemod import __version__ as __version__

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
