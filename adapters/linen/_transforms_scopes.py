"""Moving modules across a lifted transform's boundary.

Before the transform, ``get_module_scopes`` collects the scopes of the module, of the
modules and Variables it holds, and of those passed as arguments (replaced by hashable
placeholders); inside, ``set_module_scopes`` rebuilds clones bound to the inner scopes in
the same order. A module reachable twice (argument and attribute, or shared) is one
scope and one clone.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from .. import errors
from ..core import Scope, Variable
from ._module._base import Module


@dataclasses.dataclass(frozen=True)
class _VariablePlaceholder:
    collection: str
    name: str
    unbox: bool
    id: int


@dataclasses.dataclass(frozen=True)
class _InstancePlaceholder:
    cls: type
    attrs: Any
    id: int


jax.tree_util.register_static(_VariablePlaceholder)
jax.tree_util.register_static(_InstancePlaceholder)


def _field_attrs(module: Module) -> dict[str, Any]:
    d = module.__dict__
    attrs = {n: d[n] for n in module._init_field_names if n in d}
    attrs["name"] = d.get("name")
    return attrs


def _is_bound(x: Any, kind: type) -> bool:
    return isinstance(x, kind) and isinstance(getattr(x, "scope", None), Scope)


def get_module_scopes(
    module: Module, args: Any = None, kwargs: Any = None
) -> tuple[list[Scope], Any, Any]:
    """The scopes a transformed method needs (modules/Variables in ``args``/``kwargs``
    first, replaced by placeholders; then those in ``module``'s attributes; then
    ``module``'s own), and the arguments with placeholders."""
    scopes: list[Scope] = []
    memo: dict[int, Any] = {}

    def arg_scope(x: Any) -> Any:
        if _is_bound(x, Variable):
            key = id(x)
            if key not in memo:
                scopes.append(x.scope)
                memo[key] = _VariablePlaceholder(x.collection, x.name, x.unbox, key)
            return memo[key]
        if _is_bound(x, Module):
            key = x._id
            if key not in memo:
                x._try_setup(shallow=True)
                scopes.append(x.scope)  # type: ignore[arg-type]
                attrs = jax.tree.map(arg_scope, _field_attrs(x), is_leaf=_is_leaf)
                memo[key] = _InstancePlaceholder(type(x), attrs, key)
            return memo[key]
        return x

    new_args, new_kwargs = _map_args(arg_scope, (args, kwargs), _is_leaf)

    def module_scopes(m: Module) -> None:
        # One memo for arguments and attributes: a module passed both ways (or twice)
        # contributes one scope.
        if m._id in memo:
            return
        memo[m._id] = m
        m._try_setup(shallow=True)
        for leaf in jax.tree.leaves(_field_attrs(m), is_leaf=_is_leaf):
            if _is_bound(leaf, Module):
                module_scopes(leaf)
            elif _is_bound(leaf, Variable):
                scopes.append(leaf.scope)
        scopes.append(m.scope)  # type: ignore[arg-type]

    module_scopes(module)
    return scopes, new_args, new_kwargs


def _is_leaf(x: Any) -> bool:
    return isinstance(x, (Module, Variable))


def _map_args(fn: Callable[[Any], Any], tree: Any, is_leaf: Callable[[Any], bool]) -> Any:
    """``jax.tree.map(fn, tree, is_leaf=is_leaf)`` that also walks dicts whose keys do
    not sort (``{'params': False, DenyList('params'): True}`` in ``split_rngs``)."""
    if is_leaf(tree):
        return fn(tree)
    if type(tree) is dict:
        return {k: _map_args(fn, v, is_leaf) for k, v in tree.items()}
    if type(tree) in (list, tuple):
        return type(tree)(_map_args(fn, v, is_leaf) for v in tree)
    return jax.tree.map(fn, tree, is_leaf=is_leaf)


def set_module_scopes(
    module: Module, args: Any, kwargs: Any, scopes: list[Scope]
) -> tuple[Module, Any, Any]:
    """The inverse of ``get_module_scopes`` inside the transform: a clone of ``module``
    (and of the modules/Variables it holds or that were passed) bound to ``scopes``."""
    idx = 0
    memo: dict[int, Any] = {}

    def next_scope() -> Scope:
        nonlocal idx
        scope = scopes[idx]
        idx += 1
        return scope

    def is_placeholder(x: Any) -> bool:
        return isinstance(x, (_VariablePlaceholder, _InstancePlaceholder))

    def set_arg_scope(x: Any) -> Any:
        if isinstance(x, _VariablePlaceholder):
            if x.id not in memo:
                memo[x.id] = Variable(next_scope(), x.collection, x.name, unbox=x.unbox)
            return memo[x.id]
        if isinstance(x, _InstancePlaceholder):
            if x.id not in memo:
                scope = next_scope()
                attrs = jax.tree.map(set_arg_scope, x.attrs, is_leaf=is_placeholder)
                memo[x.id] = x.cls(parent=scope, **attrs)
            return memo[x.id]
        return x

    new_args, new_kwargs = _map_args(set_arg_scope, (args, kwargs), is_placeholder)

    def set_scopes(m: Module) -> Module:
        if m._id in memo:
            return memo[m._id]

        def inner(x: Any) -> Any:
            if _is_bound(x, Module):
                return set_scopes(x)
            if _is_bound(x, Variable):
                return Variable(next_scope(), x.collection, x.name, unbox=x.unbox)
            return x

        attrs = jax.tree.map(inner, _field_attrs(m), is_leaf=_is_leaf)
        new = m.clone(parent=next_scope(), **attrs)
        memo[m._id] = new
        return new

    new_module = set_scopes(module)
    if idx != len(scopes):
        raise AssertionError(f"scope list mismatch {len(scopes)} != {idx}")
    return new_module, new_args, new_kwargs


def _test_transformed_return_values(tree: Any, method_name: str | None) -> None:
    if any(isinstance(x, (Module, Variable)) for x in jax.tree.leaves(tree, is_leaf=_is_leaf)):
        raise errors.TransformedMethodReturnValueError(method_name)  # type: ignore[arg-type]
