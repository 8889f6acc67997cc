"""pytreemod: immutable PyTree modules for JAX, with collections, filters and axis metadata.

This file only re-exports; every name is defined in a private module. The core (modules,
variables, filters, partitioning, ``jit``) is imported with the package; what a program
may never touch is imported on first access (PEP 562 ``__getattr__``): ``pm.nn`` (its
layers and ops), checkpoints (safetensors), ``tabulate`` (rich), ``TrainState``,
``trace_once``, the transforms other than ``jit`` (``grad``, ``vmap``, ``scan``, ...) and
the sharding helpers. Type checkers read the same names from the ``TYPE_CHECKING`` block.
``tests/test_imports.py`` keeps ``import pytreemod`` free of the heavy optional modules.
"""

import importlib as _importlib
import typing as _typing

from ._apply import apply as apply
from ._apply import is_mutable as is_mutable
from ._errors import AxisMetadataError as AxisMetadataError
from ._errors import CheckpointError as CheckpointError
from ._errors import CheckpointFormatError as CheckpointFormatError
from ._errors import CheckpointMismatchError as CheckpointMismatchError
from ._errors import FrozenModuleError as FrozenModuleError
from ._errors import InvalidFieldError as InvalidFieldError
from ._errors import InvalidFilterError as InvalidFilterError
from ._errors import LayerConfigError as LayerConfigError
from ._errors import LogicalAxisRulesError as LogicalAxisRulesError
from ._errors import PytreemodError as PytreemodError
from ._errors import PytreemodWarning as PytreemodWarning
from ._errors import RetraceWarning as RetraceWarning
from ._errors import ShapeError as ShapeError
from ._errors import ShardingError as ShardingError
from ._errors import StateMismatchError as StateMismatchError
from ._errors import StateWriteError as StateWriteError
from ._errors import StaticArrayWarning as StaticArrayWarning
from ._errors import TransformError as TransformError
from ._errors import TreeAtError as TreeAtError
from ._errors import UndeclaredFieldError as UndeclaredFieldError
from ._errors import UnhashableModuleError as UnhashableModuleError
from ._errors import UninitializedFieldError as UninitializedFieldError
from ._filters import All as All
from ._filters import Any as Any
from ._filters import Collection as Collection
from ._filters import DenyList as DenyList
from ._filters import Everything as Everything
from ._filters import Filter as Filter
from ._filters import FilterLike as FilterLike
from ._filters import Not as Not
from ._filters import Nothing as Nothing
from ._filters import OfType as OfType
from ._filters import PathContains as PathContains
from ._filters import Predicate as Predicate
from ._filters import to_filter as to_filter
from ._jit import DonateState as DonateState
from ._jit import filter_jit as filter_jit
from ._jit import jit as jit
from ._meta import PARTITION_NAME as PARTITION_NAME
from ._meta import AxisMetadata as AxisMetadata
from ._meta import add_axis as add_axis
from ._meta import is_box as is_box
from ._meta import map_boxes as map_boxes
from ._meta import register_axis_metadata as register_axis_metadata
from ._meta import remove_axis as remove_axis
from ._meta import unbox as unbox
from ._module import BoundMethod as BoundMethod
from ._module import Module as Module
from ._module import field as field
from ._module import fields as fields
from ._module import replace as replace
from ._partition import State as State
from ._partition import Structure as Structure
from ._partition import combine as combine
from ._partition import from_variables as from_variables
from ._partition import partition as partition
from ._partition import state as state
from ._partition import structure_of as structure_of
from ._partition import to_variables as to_variables
from ._repr import tree_pformat as tree_pformat
from ._tree import apply_updates as apply_updates
from ._tree import format_path as format_path
from ._tree import is_array as is_array
from ._tree import is_inexact_array as is_inexact_array
from ._tree import tree_at as tree_at
from ._tree import tree_equal as tree_equal
from ._variables import BatchStat as BatchStat
from ._variables import Cache as Cache
from ._variables import Intermediate as Intermediate
from ._variables import Param as Param
from ._variables import Variable as Variable
from ._variables import collection_of as collection_of

__version__ = "0.1.0"

# name -> the module defining it, imported when the name is first read. Add a lazy name
# here and in the TYPE_CHECKING block below (``tests/test_imports.py`` checks they agree).
_LAZY: dict[str, str] = {
    "nn": ".nn",
    "load": "._checkpoint",
    "checkpoint_keys": "._checkpoint",
    "save": "._checkpoint",
    "save_async": "._checkpoint",
    "PendingSave": "._checkpoint_async",
    "CheckpointManager": "._checkpoint_manager",
    "checkpoint_formats": ".checkpoint_formats",
    "abstract": "._sharding",
    "tabulate": "._tabulate",
    "trace_once": "._trace_cache",
    "disable_trace_once": "._trace_cache",
    "TrainState": "._train_state",
    # Transforms and sharding: a program that never calls them never imports them.
    "LogicalRules": "._sharding",
    "LogicallyPartitioned": "._sharding",
    "Partitioned": "._sharding",
    "sharding": ".sharding",
    "MeshAxes": "._sharding",
    "RulesFallback": "._sharding",
    "get_logical_axis_rules": "._sharding",
    "get_partition_spec": "._sharding",
    "get_sharding": "._sharding",
    "logical_axis_rules": "._sharding",
    "logical_to_mesh": "._sharding",
    "logical_to_mesh_axes": "._sharding",
    "logical_to_mesh_sharding": "._sharding",
    "replicate_axis": "._sharding",
    "set_logical_axis_rules": "._sharding",
    "shard": "._sharding",
    "with_logical_constraint": "._sharding",
    "with_logical_partitioning": "._sharding",
    "with_partitioning": "._sharding",
    "CustomVjp": "._transforms_autodiff",
    "DiffState": "._transforms_autodiff",
    "custom_vjp": "._transforms_autodiff",
    "grad": "._transforms_autodiff",
    "jvp": "._transforms_autodiff",
    "value_and_grad": "._transforms_autodiff",
    "vjp": "._transforms_autodiff",
    "Carry": "._transforms_axes",
    "StateAxes": "._transforms_axes",
    "checkify": "._transforms_control",
    "checkpoint": "._transforms_control",
    "cond": "._transforms_control",
    "eval_shape": "._transforms_control",
    "fori_loop": "._transforms_control",
    "remat": "._transforms_control",
    "switch": "._transforms_control",
    "while_loop": "._transforms_control",
    "pmap": "._transforms_map",
    "vmap": "._transforms_map",
    "scan": "._transforms_scan",
    "shard_map": "._transforms_shard",
}

if _typing.TYPE_CHECKING:
    from . import checkpoint_formats as checkpoint_formats
    from . import nn as nn
    from . import sharding as sharding
    from ._checkpoint import checkpoint_keys as checkpoint_keys
    from ._checkpoint import load as load
    from ._checkpoint import save as save
    from ._checkpoint import save_async as save_async
    from ._checkpoint_async import PendingSave as PendingSave
    from ._checkpoint_manager import CheckpointManager as CheckpointManager
    from ._sharding import LogicallyPartitioned as LogicallyPartitioned
    from ._sharding import LogicalRules as LogicalRules
    from ._sharding import MeshAxes as MeshAxes
    from ._sharding import Partitioned as Partitioned
    from ._sharding import RulesFallback as RulesFallback
    from ._sharding import abstract as abstract
    from ._sharding import get_logical_axis_rules as get_logical_axis_rules
    from ._sharding import get_partition_spec as get_partition_spec
    from ._sharding import get_sharding as get_sharding
    from ._sharding import logical_axis_rules as logical_axis_rules
    from ._sharding import logical_to_mesh as logical_to_mesh
    from ._sharding import logical_to_mesh_axes as logical_to_mesh_axes
    from ._sharding import logical_to_mesh_sharding as logical_to_mesh_sharding
    from ._sharding import replicate_axis as replicate_axis
    from ._sharding import set_logical_axis_rules as set_logical_axis_rules
    from ._sharding import shard as shard
    from ._sharding import with_logical_constraint as with_logical_constraint
    from ._sharding import with_logical_partitioning as with_logical_partitioning
    from ._sharding import with_partitioning as with_partitioning
    from ._tabulate import tabulate as tabulate
    from ._trace_cache import disable_trace_once as disable_trace_once
    from ._trace_cache import trace_once as trace_once
    from ._train_state import TrainState as TrainState
    from ._transforms_autodiff import CustomVjp as CustomVjp
    from ._transforms_autodiff import DiffState as DiffState
    from ._transforms_autodiff import custom_vjp as custom_vjp
    from ._transforms_autodiff import grad as grad
    from ._transforms_autodiff import jvp as jvp
    from ._transforms_autodiff import value_and_grad as value_and_grad
    from ._transforms_autodiff import vjp as vjp
    from ._transforms_axes import Carry as Carry
    from ._transforms_axes import StateAxes as StateAxes
    from ._transforms_control import checkify as checkify
    from ._transforms_control import checkpoint as checkpoint
    from ._transforms_control import cond as cond
    from ._transforms_control import eval_shape as eval_shape
    from ._transforms_control import fori_loop as fori_loop
    from ._transforms_control import remat as remat
    from ._transforms_control import switch as switch
    from ._transforms_control import while_loop as while_loop
    from ._transforms_map import pmap as pmap
    from ._transforms_map import vmap as vmap
    from ._transforms_scan import scan as scan
    from ._transforms_shard import shard_map as shard_map


def __getattr__(name: str) -> object:
    """Import a lazily exported name on first access (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytreemod' has no attribute {name!r}")
    imported = _importlib.import_module(module, __name__)
    value = imported if module == f".{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
