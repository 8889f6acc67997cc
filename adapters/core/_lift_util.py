"""Helpers shared by the lifted transforms (``_lifted*.py``)."""

import types
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pytreemod as pm

from ._errors import CarryVariableInitError
from ._scope import Scope

NO_AXES: Mapping[Any, Any] = types.MappingProxyType({})
"""An empty, immutable default for ``{filter: axis}`` arguments."""


def unzip2(items: Iterable[tuple[Any, Any]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(keys, values)`` of ``(key, value)`` pairs."""
    pairs = tuple(items)
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def key_paths(tree: Any) -> set[str]:
    """The key paths (``['params']['w']``) of the leaves and boxes of ``tree``."""
    return {
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(tree, is_leaf=pm.is_box)[0]
    }


def scope_paths(scope_tree: Any) -> str:
    """The paths of the scopes in a PyTree of scopes, for messages."""
    scopes = jax.tree.leaves(scope_tree, is_leaf=lambda x: isinstance(x, Scope))
    return ", ".join(f'"{s.path_text}"' for s in scopes if isinstance(s, Scope))


def merge_carry(
    what: str, where: str, before: tuple[dict[str, Any], ...], after: tuple[dict[str, Any], ...]
) -> tuple[dict[str, Any], ...]:
    """The carried groups after one iteration; immutable carried collections pass through.

    Raises ``CarryVariableInitError`` if the iteration created carry variables.
    """
    merged = []
    for b, a in zip(before, after):
        m = dict(a)
        for col, value in b.items():
            m.setdefault(col, value)
        if jax.tree.structure(m, is_leaf=pm.is_box) != jax.tree.structure(b, is_leaf=pm.is_box):
            new = sorted(key_paths(m) - key_paths(b)) or sorted(key_paths(m) ^ key_paths(b))
            raise CarryVariableInitError(
                f"lift.{what} at {where}: carry variables cannot be initialized inside the "
                f"{what} body, but the body created or removed {', '.join(new)}. Create the "
                f"carry variables before the {what} (e.g. call the body once outside it)."
            )
        merged.append(m)
    return tuple(merged)


def is_scope(x: Any) -> bool:
    """Whether ``x`` is a ``Scope``."""
    return isinstance(x, Scope)


def as_arrays(tree: Any) -> Any:
    """Python numbers and NumPy values in ``tree`` (boxes' values too) become JAX arrays,
    as a JAX transform makes the values it traces: a lifted body's updates (``acc + 1``)
    are JAX arrays, so a Python ``0`` or a NumPy ``int64`` would not match them. Every other
    leaf is unchanged."""
    numeric = (bool, int, float, complex, np.ndarray, np.generic)
    return jax.tree.map(lambda x: jnp.asarray(x) if isinstance(x, numeric) else x, tree)
