"""``ModuleBase``: the class marker every Linen ``Module`` derives from.

It is defined below everything else in the chain, so the lower files (the attribute
trees, the call context, the repr, the apply functions) recognise modules with
``isinstance(x, ModuleBase)`` without importing ``Module`` (which lives at the top).
Only ``Module`` subclasses it.
"""

import dataclasses
import typing
from typing import Any

from ...core import Scope
from ._state import _ModuleInternalState


def module_field(*, kw_only: bool = False, default: Any = ...) -> Any:
    """A dataclass field for type checkers (``Module``'s ``parent`` and ``name``)."""
    return dataclasses.field(kw_only=kw_only, default=default)


@typing.dataclass_transform(field_specifiers=(dataclasses.field, module_field))
class ModuleBase:
    """Marks ``Module`` subclasses as dataclasses for type checkers, and marks modules
    for ``isinstance`` checks below ``Module`` (the attributes declared here are not
    dataclass fields)."""

    if typing.TYPE_CHECKING:
        scope: Scope | None
        _state: _ModuleInternalState
        _parent_ref: Any
        _compact_name_scope_methods: tuple[str, ...]
        _init_field_names: tuple[str, ...]
        _id: int
        __dataclass_fields__: dict[str, dataclasses.Field[Any]]
