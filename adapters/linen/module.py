"""``adapters.linen.module``: the Linen ``Module`` and its helpers (``flax.linen.module``).

The implementation lives in private files: ``_module_base`` (the class: naming, lazy
setup, method wrapping), ``_module_dataclass`` (the dataclass transform, descriptor and
hash wrappers), ``_module_variables`` (param, variable,
rngs, sow, perturb), ``_module_apply`` (init/apply/bind and the functional
``init``/``apply``), ``_module_context`` (thread-local module stack, interceptors, named
calls), ``_module_tree`` (containers of submodules), ``_module_repr`` and
``_module_extras`` (compact_name_scope, share_scope, merge_param).
"""

from ..core import Scope as Scope
from ..core import Variable as Variable
from ._module_apply import _get_unbound_fn as _get_unbound_fn
from ._module_apply import apply as apply
from ._module_apply import capture_call_intermediates as capture_call_intermediates
from ._module_apply import init as init
from ._module_apply import init_with_output as init_with_output
from ._module_base import DescriptorWrapper as DescriptorWrapper
from ._module_base import Module as Module
from ._module_base import ParentDescriptor as ParentDescriptor
from ._module_base import _get_fn_name as _get_fn_name
from ._module_base import compact as compact
from ._module_base import nowrap as nowrap
from ._module_base import wrap_descriptor_once as wrap_descriptor_once
from ._module_base import wrap_method_once as wrap_method_once
from ._module_context import InterceptorContext as InterceptorContext
from ._module_context import ThreadLocalStack as ThreadLocalStack
from ._module_context import _CallInfo as _CallInfo
from ._module_context import _CallInfoContext as _CallInfoContext
from ._module_context import _context as _context
from ._module_context import _derive_profiling_name as _derive_profiling_name
from ._module_context import _global_interceptor_stack as _global_interceptor_stack
from ._module_context import _ParentSentinel as _ParentSentinel
from ._module_context import _tabulate_context as _tabulate_context
from ._module_context import _unspecified_parent as _unspecified_parent
from ._module_context import disable_named_call as disable_named_call
from ._module_context import enable_named_call as enable_named_call
from ._module_context import intercept_methods as intercept_methods
from ._module_context import override_named_call as override_named_call
from ._module_context import run_interceptors as run_interceptors
from ._module_extras import CompactNameScope as CompactNameScope
from ._module_extras import compact_name_scope as compact_name_scope
from ._module_extras import merge_param as merge_param
from ._module_extras import share_scope as share_scope
from ._module_state import SetupState as SetupState
from ._module_state import _ModuleInternalState as _ModuleInternalState
from ._module_tree import _freeze_attr as _freeze_attr
from ._module_tree import _get_local_method_names as _get_local_method_names
from ._module_tree import _get_suffix_value_pairs as _get_suffix_value_pairs
from ._module_tree import _map_over_modules_in_tree as _map_over_modules_in_tree
from ._module_tree import _map_submodules as _map_submodules
from ._module_variables import tuple_init as tuple_init
from ._module_variables import tuple_reduce as tuple_reduce

_Sentinel = _ParentSentinel

__all__ = [
    "CompactNameScope",
    "InterceptorContext",
    "Module",
    "Scope",
    "SetupState",
    "Variable",
    "apply",
    "compact",
    "compact_name_scope",
    "disable_named_call",
    "enable_named_call",
    "init",
    "init_with_output",
    "intercept_methods",
    "merge_param",
    "nowrap",
    "override_named_call",
    "share_scope",
]
