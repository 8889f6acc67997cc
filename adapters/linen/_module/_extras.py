"""Module helpers outside the class: ``compact_name_scope`` (whose child module,
``CompactNameScope``, lives with ``Module`` in ``_base``), ``share_scope``, ``merge_param``."""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ... import errors
from ...core import Scope
from ._base import Module

T = TypeVar("T")
_CallableT = TypeVar("_CallableT", bound=Callable[..., Any])


def compact_name_scope(fun: _CallableT) -> _CallableT:
    """Run a method as if it were the ``@compact`` method of a child module named after
    it: what it creates inline lands under ``<method name>/``. It may be combined with
    (and called from) ``setup`` or a ``@compact`` method."""

    @functools.wraps(fun)
    def compact_name_scope_wrapper(self: Module, *args: Any, **kwargs: Any) -> Any:
        name = fun.__name__
        modules = self.__dict__.get("_compact_name_scope_modules")
        if modules is None:
            self._try_setup()
            modules = self.__dict__.get("_compact_name_scope_modules")
        if modules is None:
            raise ValueError(
                f"Cannot call compact_name_scope method {name!r} on a Module that has not been "
                f"setup. This is likely because you are calling {name!r} from outside of init "
                "or apply."
            )
        return modules[name](*args, **kwargs)

    compact_name_scope_wrapper.compact_name_scope = True  # type: ignore[attr-defined]
    compact_name_scope_wrapper.inner_fun = fun  # type: ignore[attr-defined]
    compact_name_scope_wrapper.nowrap = True  # type: ignore[attr-defined]
    return compact_name_scope_wrapper  # type: ignore[return-value]


def share_scope(module: Module, other: Module, /) -> None:
    """Make ``module`` and ``other`` use one scope: their variables and submodules live
    side by side. The one whose scope is a child of the other's moves up (the parent's
    scope wins); otherwise ``module`` takes ``other``'s scope."""
    if module.scope is None or other.scope is None:
        raise errors.CallShareScopeOnUnboundModuleError()

    def is_descendant(scope: Scope, candidate: Scope | None) -> bool:
        while candidate is not None:
            if candidate is scope:
                return True
            candidate = candidate.parent
        return False

    if is_descendant(module.scope, other.scope):
        to_update, new_scope = other, module.scope
    else:
        to_update, new_scope = module, other.scope
    old_scope = to_update.scope
    object.__setattr__(to_update, "scope", new_scope)
    for child in to_update._state.children.values():
        if not isinstance(child, Module) or child.scope is None:
            continue
        if child.scope.parent is old_scope or child.scope.parent == old_scope:
            if isinstance(child.scope.name, str):
                new_scope.reserve(child.scope.name)
            child.scope.parent = new_scope


def merge_param(name: str, a: T | None, b: T | None) -> T:
    """The one of ``a`` (constructor) and ``b`` (call time) that is given; an error if
    neither or both are."""
    if a is None and b is None:
        raise ValueError(f'Parameter "{name}" must be passed to the constructor or at call time.')
    if a is not None and b is not None:
        raise ValueError(
            f'Parameter "{name}" was passed to the constructor and at call time. Should be '
            "passed just once."
        )
    return a if a is not None else b  # type: ignore[return-value]
