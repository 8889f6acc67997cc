"""``ToPytreemod``: a Linen module and its variables as one frozen pytreemod Module.

The Linen module is a static field (configuration, in the treedef); the variables are
children, ``variables[collection][...]`` holding pytreemod Variables of the type
``variable_type(collection)`` gives (``params`` -> ``pm.Param``...), boxes kept inside.
Calling the module runs ``linen_module.apply`` on the current values. The Linen
collections mutable for that call are those the enclosing ``pm.apply(model, ...,
mutable=...)`` lets the model write (``pm.is_mutable``), so Linen's own
``is_mutable_collection`` answers as in Linen; every variable of those the call changed is
written with ``Variable.set`` and recorded by the enclosing ``pm.apply``. A write to any
other collection is refused with ``pm.StateWriteError``.
"""

from collections.abc import Mapping
from typing import Any

import jax

import pytreemod as pm

from .. import linen as nn
from ..core.errors import ModifyScopeVariableError
from ._keys import variable_type


def _is_var(x: Any) -> bool:
    return isinstance(x, pm.Variable)


def _wrap(variables: Mapping[str, Any], types: Mapping[str, type[pm.Variable[Any]]]) -> Any:
    def box(col: str, tree: Any) -> Any:
        if isinstance(tree, Mapping):
            return {k: box(col, v) for k, v in tree.items()}
        return types.get(col, variable_type(col))(tree)

    return {col: box(col, tree) for col, tree in variables.items()}


def _writable(collection: Any) -> bool:
    """Whether the enclosing ``pm.apply`` lets the call write this collection (its
    variables all share one type, so the first one answers for all)."""
    leaves = jax.tree.leaves(collection, is_leaf=_is_var)
    return bool(leaves) and pm.is_mutable(leaves[0])


def _values(variables: Any) -> dict[str, Any]:
    return jax.tree.map(lambda v: v.get(), variables, is_leaf=_is_var)


class BridgeError(pm.PytreemodError):
    """A Linen call made a change a pytreemod model cannot hold (a new variable)."""


class ToPytreemod(pm.Module):
    """A Linen module with its variables, as a pytreemod Module.

    **Arguments:**

    - ``module``: an unbound Linen module (kept as a static field).
    - ``variables``: its variables, ``{collection: nested dict}`` as ``init`` returns them.
    - ``variable_types``: optional ``{collection: Variable type}`` overriding the
      bridge's default types (``variable_type``).

    ``model(*args, method=None, rngs=None, **kwargs)`` equals
    ``module.apply(variables, *args, method=method, rngs=rngs, **kwargs)``. State writes
    go through ``pm.apply(model, ..., mutable=...)``.
    """

    module: nn.Module = pm.field(static=True)
    variables: dict[str, Any]

    def __init__(
        self,
        module: nn.Module,
        variables: Mapping[str, Any],
        *,
        variable_types: Mapping[str, type[pm.Variable[Any]]] | None = None,
    ) -> None:
        self.module = module
        self.variables = _wrap(variables, variable_types or {})

    def __call__(
        self,
        *args: Any,
        method: Any = None,
        rngs: Any = None,
        **kwargs: Any,
    ) -> Any:
        stored = _values(self.variables)
        mutable = [col for col in stored if _writable(self.variables[col])]
        try:
            out, updates = self.module.apply(
                stored, *args, method=method, rngs=rngs, mutable=mutable, **kwargs
            )
        except ModifyScopeVariableError as error:
            raise pm.StateWriteError(
                f"The wrapped Linen module's write was refused: {error} A pytreemod model "
                "is written only inside `out, model = pm.apply(model, ..., mutable=...)` "
                "whose filter names the collection (outside pytreemod.apply nothing is "
                "mutable); or do not write it (e.g. BatchNorm with use_running_average=True "
                "in evaluation)."
            ) from error
        self._record(updates)
        return out

    def _record(self, updates: Mapping[str, Any]) -> None:
        for col, tree in updates.items():
            _record_tree(self.variables.get(col, {}), tree, (col,))

    def to_linen(self) -> tuple[nn.Module, dict[str, Any]]:
        """``(module, variables)``: the Linen module and a plain variables dict of the
        current values (boxes kept)."""
        return self.module, _values(self.variables)


def _record_tree(held: Any, new: Any, path: tuple[Any, ...]) -> None:
    if _is_var(held):
        if not _same(held.get(), new):
            held.set(new)
        return
    if not isinstance(new, Mapping) or not isinstance(held, Mapping):
        raise BridgeError(_new_message(path))
    for key, value in new.items():
        if key not in held:
            raise BridgeError(_new_message((*path, key)))
        _record_tree(held[key], value, (*path, key))


def _same(a: Any, b: Any) -> bool:
    """Whether ``b`` is ``a`` unchanged: the same structure and the same leaf objects
    (a Linen call returns the stored arrays of the variables it did not write)."""
    if a is b:
        return True
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    return tree_a == tree_b and all(x is y for x, y in zip(leaves_a, leaves_b, strict=True))


def _new_message(path: tuple[Any, ...]) -> str:
    where = "/".join(map(str, path))
    return (
        f"The Linen call created the variable {where}, which the pytreemod model does not "
        "have: a pytreemod model cannot grow. Initialize it first (e.g. run "
        "module.init or module.apply(..., mutable=True) and build the model from the "
        "returned variables)."
    )


def from_linen(
    module: nn.Module,
    variables: Mapping[str, Any],
    *,
    variable_types: Mapping[str, type[pm.Variable[Any]]] | None = None,
) -> ToPytreemod:
    """``ToPytreemod(module, variables)``: a Linen module with its variables as a
    pytreemod Module."""
    return ToPytreemod(module, variables, variable_types=variable_types)
