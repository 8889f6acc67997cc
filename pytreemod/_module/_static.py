"""Static checks: what a static field (``field(static=True)``) may hold."""

import warnings
from typing import Any

import jax
import jax.tree_util as jtu
import numpy as np

from .._errors import InvalidFieldError, StaticArrayWarning
from .._repr import array_summary
from .._tree import format_path
from .._variables import Variable

# Values that are neither arrays nor Variables nor NumPy scalars, nor hold any.
_PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None)})
# warnings.warn's stacklevel for the line that constructs the module: the frames are
# _check_static_value < check_static_field < finish_init < _ModuleMeta.__call__ < caller.
STACKLEVEL = 5


def check_static_field(cls: Any, name: str, value: Any) -> None:
    """A static value must hold no array or Variable and be hashable."""
    _check_static_value(cls, name, value)
    try:
        hash(value)
    except TypeError:
        raise InvalidFieldError(
            f"{cls.__name__}.{name} is a static field but its value "
            f"{type(value).__name__} is unhashable. Static values are part of the tree "
            "structure, which JAX hashes; use a tuple instead of a list, a frozenset "
            "instead of a set."
        ) from None


def _check_static_value(cls: Any, name: str, value: Any) -> None:
    """An array or Variable in a static field is an error: it would never be traced,
    differentiated or partitioned. A NumPy scalar only warns (it is hashable, so it works
    as a compile-time constant, but it is never traced either)."""
    if type(value) in _PLAIN or (type(value) is tuple and all(type(v) in _PLAIN for v in value)):
        return  # the usual configuration (``3``, ``"SAME"``, ``(1, 1)``), without a tree walk
    is_variable = lambda x: isinstance(x, Variable)
    for path, leaf in jtu.tree_leaves_with_path(value, is_leaf=is_variable):
        where = f"{cls.__name__}.{name}" + ("" if not path else format_path(path))
        if isinstance(leaf, Variable):
            held = f"a {type(leaf).__name__} (collection {leaf.collection!r})"
        elif isinstance(leaf, (jax.Array, np.ndarray)):
            held = f"an array {array_summary(leaf)}"
        elif isinstance(leaf, np.generic):
            warnings.warn(
                f"{where} is a static field but holds a NumPy scalar ({leaf!r}): it is a "
                "compile-time constant, never traced or differentiated, and a new value "
                "forces a recompile. Declare the field without static=True if it is data.",
                StaticArrayWarning,
                stacklevel=STACKLEVEL,
            )
            continue
        else:
            continue
        raise InvalidFieldError(
            f"{where} is a static field (field(static=True)) but holds {held}. Static "
            "values are part of the tree structure: it would be left out of partition, "
            "gradients and the optimizer, never traced or differentiated. Declare "
            f"`{name}` as a regular field (drop static=True; arrays and Variables are "
            "children by default)."
        )
