"""pytreemod: immutable PyTree modules for JAX, with collections, filters and axis metadata.

This file only re-exports; every name is defined in a private module.
"""

from ._errors import AxisMetadataError as AxisMetadataError
from ._errors import FrozenModuleError as FrozenModuleError
from ._errors import InvalidFieldError as InvalidFieldError
from ._errors import InvalidFilterError as InvalidFilterError
from ._errors import PytreemodError as PytreemodError
from ._errors import PytreemodWarning as PytreemodWarning
from ._errors import StateMismatchError as StateMismatchError
from ._errors import StaticArrayWarning as StaticArrayWarning
from ._errors import TreeAtError as TreeAtError
from ._errors import UndeclaredFieldError as UndeclaredFieldError
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
from ._meta import PARTITION_NAME as PARTITION_NAME
from ._meta import AxisMetadata as AxisMetadata
from ._meta import Partitioned as Partitioned
from ._meta import is_box as is_box
from ._meta import unbox as unbox
from ._meta import with_partitioning as with_partitioning
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
