"""NNX Variables: mutable pytreemod Variables with metadata (``flax.nnx.variablelib``).

``nnx.Variable`` is a ``pm.Variable`` and ``nnx.Param``/``BatchStat``/``Cache``/
``Intermediate`` are ``pm.Param``/``pm.BatchStat``/``pm.Cache``/``pm.Intermediate``, so
pytreemod's filters select them by type or collection name as they select pytreemod's own.
What NNX adds, as Flax 0.12.8 has it:

- the box is mutable: ``v[...] = x``, ``v.set_value(x)`` (``v.value`` still works but is
  deprecated in Flax), ``v[i] = x`` writes a slice;
- it carries metadata (``Param(x, out_sharding=...)``), always including the three
  required entries ``hijax``, ``ref`` and ``eager_sharding``;
- it is a pytree whose one child is the value (key ``GetAttrKey('value')``) and whose aux
  data is the sorted metadata, so ``jax.tree.map`` keeps the metadata;
- ``ref=True`` keeps the value in a ``jax.Ref`` (``jax.new_ref``), read and written in place;
- it may only be mutated in the JAX trace it was created in (``TraceContextError``).

``var_defaults(hijax=, ref=)`` and ``use_eager_sharding`` set the defaults of new Variables.
A Variable made with ``hijax=True`` is a ``HijaxVariable``: a JAX "hijax" type that passes
``isinstance`` for its Variable type and that a plain ``jax.jit``/``jax.grad``/``lax.scan``
may mutate, the change reaching the caller (see ``_hijax``).

The package's parts: ``_defaults`` (the settings), ``_metadata`` (hooks, refs, metadata
helpers), ``_variable`` (the class), ``_hijax`` (hijax Variables), ``_types`` (Param and
the other Variable types, the collection-name registry). Everything public is
re-exported here, under this module's name.
"""

from ._defaults import VARIABLE_CONTEXT as VARIABLE_CONTEXT
from ._defaults import VarDefaults as VarDefaults
from ._defaults import VarDefaultsContext as VarDefaultsContext
from ._defaults import VariableContext as VariableContext
from ._defaults import use_eager_sharding as use_eager_sharding
from ._defaults import using_eager_sharding as using_eager_sharding
from ._defaults import var_defaults as var_defaults
from ._hijax import AbstractVariable as AbstractVariable
from ._hijax import HijaxVariable as HijaxVariable
from ._hijax import VariableQDD as VariableQDD
from ._hijax import get_variable_p as get_variable_p
from ._hijax import lower_hijax as lower_hijax
from ._hijax import new_variable_p as new_variable_p
from ._hijax import set_variable_p as set_variable_p
from ._metadata import A as A
from ._metadata import AddAxisHook as AddAxisHook
from ._metadata import AxisIndex as AxisIndex
from ._metadata import AxisName as AxisName
from ._metadata import CreateValueHook as CreateValueHook
from ._metadata import GetValueHook as GetValueHook
from ._metadata import Ref as Ref
from ._metadata import RemoveAxisHook as RemoveAxisHook
from ._metadata import SetValueHook as SetValueHook
from ._metadata import VariableMetadata as VariableMetadata
from ._metadata import is_array_ref as is_array_ref
from ._types import BatchStat as BatchStat
from ._types import Cache as Cache
from ._types import Intermediate as Intermediate
from ._types import Param as Param
from ._types import Perturbation as Perturbation
from ._types import RngCount as RngCount
from ._types import RngKey as RngKey
from ._types import RngState as RngState
from ._types import VariableState as VariableState
from ._types import VariableTypeCache as VariableTypeCache
from ._types import _unwrap as _unwrap
from ._types import register_variable_name as register_variable_name
from ._types import variable_name_from_type as variable_name_from_type
from ._types import variable_type_from_name as variable_type_from_name
from ._types import with_metadata as with_metadata
from ._variable import _LIBRARY_DIRS as _LIBRARY_DIRS
from ._variable import Variable as Variable
from ._variable import VariableMeta as VariableMeta

# The public classes and functions report this module as theirs (reprs, pickles, docs).
for _obj in (
    VarDefaults,
    VarDefaultsContext,
    use_eager_sharding,
    using_eager_sharding,
    var_defaults,
    VariableMetadata,
    Variable,
    VariableMeta,
    HijaxVariable,
    AbstractVariable,
    VariableQDD,
    Param,
    BatchStat,
    Cache,
    Intermediate,
    Perturbation,
    RngState,
    RngKey,
    RngCount,
    with_metadata,
    register_variable_name,
    variable_name_from_type,
    variable_type_from_name,
):
    _obj.__module__ = __name__
del _obj
