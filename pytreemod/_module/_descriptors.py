"""The descriptors that make methods read from a Module instance ``BoundMethod`` PyTrees,
and which methods get them.

The call hook: while ``call_hook`` (a context variable) holds a hook, every Module
``__call__`` looked up (``model(x)`` and ``model.__call__`` alike) runs through it. Its
owner is ``pm.tabulate`` (``_tabulate.hooked_calls`` sets it); unset, a call pays one
``ContextVar.get`` and nothing else. Nothing is patched.
"""

import contextvars
import functools
import types
from collections.abc import Callable
from typing import Any, cast

from ._bound import BoundMethod, new_partial

CallHook = Callable[..., Any]
"""``hook(func, module, *args, **kwargs)``: runs the call ``module(*args, **kwargs)``,
whose method is ``func`` (as defined in the class body), in place of ``func(module,
*args, **kwargs)``, and returns what the call returns."""

call_hook: contextvars.ContextVar[CallHook | None] = contextvars.ContextVar(
    "pytreemod_call_hook", default=None
)
"""The hook every Module ``__call__`` goes through while one is set."""


class _MethodDescriptor:
    """Turns attribute access ``module.method`` into a ``BoundMethod`` PyTree."""

    def __init__(self, func: types.FunctionType):
        self.__func__ = func
        functools.update_wrapper(cast(Any, self), func)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self.__func__
        return new_partial(BoundMethod, self.__func__, instance)


class _CallDescriptor(_MethodDescriptor):
    """``__call__``: a ``BoundMethod`` as any method, routed through ``call_hook`` when
    one is set."""

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self.__func__
        hook = call_hook.get()
        if hook is None:
            return new_partial(BoundMethod, self.__func__, instance)
        hooked = functools.update_wrapper(functools.partial(hook, self.__func__), self.__func__)
        return new_partial(BoundMethod, hooked, instance)


def is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


# Dunders that stay plain functions: Python (or a library: copy, pickle, dataclasses, JAX,
# NumPy, treescope, rich) calls them implicitly, and some must be functions in the class
# body (``__new__``, ``__init_subclass__``, ``__class_getitem__``; ``__check_init__`` is
# called from the class dict). Every other method, ``__call__`` and operators included,
# is a ``BoundMethod`` PyTree when read from an instance.
_PLAIN_DUNDERS = frozenset(
    {
        *("__new__", "__init__", "__post_init__", "__check_init__", "__del__"),
        *("__init_subclass__", "__class_getitem__", "__set_name__", "__subclasshook__"),
        *("__instancecheck__", "__subclasscheck__", "__mro_entries__", "__prepare__"),
        *("__getattr__", "__getattribute__", "__setattr__", "__delattr__", "__dir__"),
        *("__get__", "__set__", "__delete__"),
        *("__repr__", "__str__", "__bytes__", "__format__", "__sizeof__"),
        *("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__"),
        *("__len__", "__length_hint__", "__iter__", "__next__", "__reversed__"),
        *("__contains__", "__enter__", "__exit__", "__aenter__", "__aexit__"),
        *("__await__", "__aiter__", "__anext__", "__buffer__", "__release_buffer__"),
        *("__index__", "__int__", "__float__", "__complex__", "__fspath__"),
        *("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__"),
        *("__getnewargs__", "__getnewargs_ex__", "__copy__", "__deepcopy__", "__replace__"),
        *("__array__", "__array_ufunc__", "__array_function__", "__array_priority__"),
        *("__jax_array__", "__dlpack__", "__dlpack_device__", "__tree_flatten__"),
        *("__treescope_repr__", "__rich_repr__", "__rich__", "__rich_console__"),
    }
)


def _wraps_as_bound_method(name: str) -> bool:
    return not is_dunder(name) or name not in _PLAIN_DUNDERS


def wrap_methods(namespace: dict[str, Any]) -> None:
    """Replace the functions of a class body that read as ``BoundMethod``s by their
    descriptors (``__call__``'s is the hooked one)."""
    for key, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and _wraps_as_bound_method(key):
            descriptor = _CallDescriptor if key == "__call__" else _MethodDescriptor
            namespace[key] = descriptor(value)
