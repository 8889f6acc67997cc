"""``adapters.linen.module``: the Linen ``Module`` and its helpers (``flax.linen.module``).

This file is the Flax-path face; the implementation is the one-way chain of files in
``_module/`` (see ``_module/README.md`` for what each file does and what may import what).
"""

from ..core import Scope as Scope
from ..core import Variable as Variable
from ._module._apply import _get_unbound_fn as _get_unbound_fn
from ._module._apply import apply as apply
from ._module._apply import capture_call_intermediates as capture_call_intermediates
from ._module._apply import init as init
from ._module._apply import init_with_output as init_with_output
from ._module._base import CompactNameScope as CompactNameScope
from ._module._base import Module as Module
from ._module._base import ParentDescriptor as ParentDescriptor
from ._module._base import _get_fn_name as _get_fn_name
from ._module._base import compact as compact
from ._module._base import nowrap as nowrap
from ._module._base import wrap_method_once as wrap_method_once
from ._module._context import InterceptorContext as InterceptorContext
from ._module._context import ThreadLocalStack as ThreadLocalStack
from ._module._context import _CallInfo as _CallInfo
from ._module._context import _CallInfoContext as _CallInfoContext
from ._module._context import _context as _context
from ._module._context import _derive_profiling_name as _derive_profiling_name
from ._module._context import _global_interceptor_stack as _global_interceptor_stack
from ._module._context import _ParentSentinel as _ParentSentinel
from ._module._context import _tabulate_context as _tabulate_context
from ._module._context import _unspecified_parent as _unspecified_parent
from ._module._context import disable_named_call as disable_named_call
from ._module._context import enable_named_call as enable_named_call
from ._module._context import intercept_methods as intercept_methods
from ._module._context import override_named_call as override_named_call
from ._module._context import run_interceptors as run_interceptors
from ._module._dataclass import DescriptorWrapper as DescriptorWrapper
from ._module._dataclass import wrap_descriptor_once as wrap_descriptor_once
from ._module._extras import compact_name_scope as compact_name_scope
from ._module._extras import merge_param as merge_param
from ._module._extras import share_scope as share_scope
from ._module._state import SetupState as SetupState
from ._module._state import _ModuleInternalState as _ModuleInternalState
from ._module._tree import _freeze_attr as _freeze_attr
from ._module._tree import _get_local_method_names as _get_local_method_names
from ._module._tree import _get_suffix_value_pairs as _get_suffix_value_pairs
from ._module._tree import _map_over_modules_in_tree as _map_over_modules_in_tree
from ._module._tree import _map_submodules as _map_submodules
from ._module._variables import tuple_init as tuple_init
from ._module._variables import tuple_reduce as tuple_reduce

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
