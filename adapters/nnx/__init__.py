"""adapters.nnx: ``flax.nnx`` rebuilt on pytreemod.

Code written against ``flax.nnx`` (Flax 0.12.8) runs after changing ``flax`` to
``adapters`` in its imports. NNX Variables are pytreemod Variables in the same collections,
NNX filters are pytreemod's filter language, the layers' math is ``pytreemod.nn.functional``
and NNX's transforms are pytreemod transforms plus the split/merge of the object graph.
See docs/nnx.md.

The module layout is Flax's (``graphlib``, ``variablelib``, ``statelib``, ``rnglib``,
``nn.linear``...), so code that imports those submodules finds them here.
"""
# Each section below re-exports one area's public names; the areas are the submodules.

# --- filters (filterlib) ---
from .filterlib import All as All
from .filterlib import Any as Any
from .filterlib import Everything as Everything
from .filterlib import Not as Not
from .filterlib import Nothing as Nothing
from .filterlib import OfType as OfType
from .filterlib import PathContains as PathContains
from .filterlib import WithTag as WithTag

# --- variables (variablelib) ---
from .variablelib import BatchStat as BatchStat
from .variablelib import Cache as Cache
from .variablelib import Intermediate as Intermediate
from .variablelib import Param as Param
from .variablelib import Variable as Variable

# --- state (statelib) ---
from .statelib import State as State
from .statelib import filter_state as filter_state
from .statelib import merge_state as merge_state
from .statelib import replace_by_pure_dict as replace_by_pure_dict
from .statelib import restore_int_paths as restore_int_paths
from .statelib import split_state as split_state
from .statelib import to_flat_state as to_flat_state
from .statelib import to_pure_dict as to_pure_dict

# --- graph (graphlib) ---
from .graphlib import GraphDef as GraphDef
from .graphlib import clone as clone
from .graphlib import graphdef as graphdef
from .graphlib import iter_graph as iter_graph
from .graphlib import merge as merge
from .graphlib import split as split
from .graphlib import state as state
from .graphlib import update as update

# --- objects and modules (pytreelib, module, helpers) ---
from .module import Dict as Dict
from .module import List as List
from .module import Module as Module
from .module import data as data

# --- randomness (rnglib) ---
from .rnglib import Rngs as Rngs
from .rnglib import RngStream as RngStream
from .variablelib import RngCount as RngCount
from .variablelib import RngKey as RngKey
from .variablelib import RngState as RngState

# --- sharding (spmd) ---

# --- transforms (extract, transforms/) ---
from .transforms.transforms import eval_shape as eval_shape

# --- layers (nn/) ---
from .nn import initializers as initializers
from .nn.linear import Dropout as Dropout
from .nn.linear import Embed as Embed
from .nn.linear import Linear as Linear
from .nn.linear import Sequential as Sequential
from .nn.normalization import BatchNorm as BatchNorm
from .nn.normalization import LayerNorm as LayerNorm

# --- training (training/) ---

# --- summary, display ---

# --- bridge, compat ---

# --- submodules reachable as attributes (nnx.graphlib, nnx.variablelib, ...) ---
from . import filterlib as filterlib
from . import graphlib as graphlib
from . import statelib as statelib
from . import variablelib as variablelib
