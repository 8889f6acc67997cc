"""adapters.nnx: a subset of ``flax.nnx`` over plain Python objects, built on pytreemod.

Supported: ``Rngs``/``RngStream``; ``Variable``, ``Param``, ``BatchStat``, ``Cache``,
``Intermediate`` (``pm.Variable`` subclasses: ``nnx.Param`` is a ``pm.Param``); ``Module``,
``List``, ``Dict``, ``data``; the graph functions ``split``, ``merge``, ``state``, ``update``,
``graphdef``, ``clone``, ``iter_graph``, ``eval_shape``; ``State`` with ``to_pure_dict``,
``replace_by_pure_dict``, ``restore_int_paths``, ``to_flat_state``, ``split_state``,
``filter_state``, ``merge_state``; pytreemod's filters (a string is a collection) plus
``WithTag`` and ``PathContains(exact=)``; layers ``Linear``, ``Sequential``, ``Dropout``,
``LayerNorm``, ``BatchNorm``, ``Embed``; ``initializers``. Any other name raises an
``AttributeError`` listing ``SUPPORTED``. See docs/nnx.md.
"""

from typing import Any as _Any

from pytreemod import All as All
from pytreemod import Any as Any
from pytreemod import Everything as Everything
from pytreemod import Not as Not
from pytreemod import Nothing as Nothing
from pytreemod import OfType as OfType

from . import initializers as initializers
from ._filters import PathContains as PathContains
from ._filters import WithTag as WithTag
from ._graph import GraphDef as GraphDef
from ._graph import clone as clone
from ._graph import graphdef as graphdef
from ._graph import iter_graph as iter_graph
from ._graph import merge as merge
from ._graph import split as split
from ._graph import state as state
from ._graph import update as update
from ._layers import Dropout as Dropout
from ._layers import Embed as Embed
from ._layers import Linear as Linear
from ._layers import Sequential as Sequential
from ._module import Dict as Dict
from ._module import List as List
from ._module import Module as Module
from ._module import data as data
from ._normalization import BatchNorm as BatchNorm
from ._normalization import LayerNorm as LayerNorm
from ._rngs import Rngs as Rngs
from ._rngs import RngStream as RngStream
from ._state import State as State
from ._state import filter_state as filter_state
from ._state import merge_state as merge_state
from ._state import replace_by_pure_dict as replace_by_pure_dict
from ._state import restore_int_paths as restore_int_paths
from ._state import split_state as split_state
from ._state import to_flat_state as to_flat_state
from ._state import to_pure_dict as to_pure_dict
from ._transforms import eval_shape as eval_shape
from ._variables import BatchStat as BatchStat
from ._variables import Cache as Cache
from ._variables import Intermediate as Intermediate
from ._variables import Param as Param
from ._variables import RngCount as RngCount
from ._variables import RngKey as RngKey
from ._variables import RngState as RngState
from ._variables import Variable as Variable

SUPPORTED: tuple[str, ...] = tuple(
    sorted(name for name in dir() if not name.startswith("_") and name != "SUPPORTED")
)
"""The names this subset of ``flax.nnx`` provides."""


def __getattr__(name: str) -> _Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"adapters.nnx implements a subset of flax.nnx ({', '.join(SUPPORTED)}); "
        f"`{name}` is not available"
    )
