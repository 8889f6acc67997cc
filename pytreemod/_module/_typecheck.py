"""Type-check wiring: a class created with ``typecheck=True`` (or under one) has its own
methods wrapped by ``_shapecheck.checked``."""

import types
from typing import Any

from .._shapecheck import checked, python_numbers
from ._descriptors import is_dunder

_UNCHECKED = frozenset({"__init__", "__check_init__", "__post_init__", "__repr__"})


def typecheck_methods(namespace: dict[str, Any]) -> None:
    """Wrap the class's own methods (``__call__`` and public ones) with jaxtyping+beartype.

    The check runs whenever the method is called eagerly, and once per trace under
    ``jit``: a compiled step pays nothing for it. A failed check is a ``ShapeError`` naming
    the class, the method, the argument and the dimension (``_shapecheck.checked``).
    ``__init__`` is not checked (modules rebuilt by JAX never run it anyway), nor is a
    method already wrapped by ``checked`` (the layers' own).
    """
    init = namespace.get("__init__")
    if isinstance(init, types.FunctionType):  # NumPy scalars arrive as Python numbers
        namespace["__init__"] = python_numbers(init)
    for key, value in list(namespace.items()):
        if not isinstance(value, types.FunctionType) or key in _UNCHECKED:
            continue
        if is_dunder(key) and key != "__call__":
            continue
        if getattr(value, "__no_type_check__", False):
            continue
        namespace[key] = checked(value, method=True)


def checks_numbers(init: Any) -> Any:
    """A generated ``__init__`` on a type-checked class takes NumPy scalars as Python
    numbers, as a custom one does."""
    return python_numbers(init)
