"""``flax.nnx.bridge.module``: an NNX Module written like a Linen module.

``bridge.Module`` subclasses are dataclasses with Linen's conventions: submodules and
variables are declared in ``setup()`` or inside a ``@bridge.compact`` method
(``self.param``, ``self.variable``, auto-named ``Dense_0``...), and the module is run with
``init``/``apply``/``init_with_output`` on a Linen-style variables dict. Underneath it is an
NNX Module: the declared Variables are its attributes, so it is also usable directly
(``nnx.split``, ``nnx.jit``...) once bound.

The context of a running bridge module (which module is current, whether it is inside a
``compact`` method, how many submodules of each type it named) is ``MODULE_CONTEXT``, a
thread-local stack, as in Linen.
"""

import dataclasses
import enum
import functools
import inspect
import threading
import typing as tp
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
import numpy as np

from ... import errors
from ...core import FrozenDict, meta
from .. import graphlib, pytreelib, rnglib, statelib, traversals, variablelib
from .. import module as nnx_module
from . import variables as bridge_variables

A = TypeVar("A")
M = TypeVar("M", bound="Module")
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class ModuleStackEntry:
    """One running bridge module: whether it runs a ``compact`` method, and the number
    of auto-named submodules of each type so far."""

    module: "Module"
    in_compact: bool
    type_counter: defaultdict[type, int] = dataclasses.field(
        default_factory=lambda: defaultdict(int)
    )


@dataclasses.dataclass
class ModuleContext(threading.local):
    """The per-thread stack of running bridge modules (``None`` at the bottom)."""

    module_stack: list[ModuleStackEntry | None] = dataclasses.field(default_factory=lambda: [None])


MODULE_CONTEXT = ModuleContext()


class ModuleState(statelib.State):
    """State put on a module for a submodule not created yet; it is loaded into the
    submodule when ``setup``/``compact`` assigns it, and hidden from attribute reads."""


pytreelib.register_data_type(ModuleState)


class Scope(pytreelib.Pytree):
    """What a bound bridge module runs with: its RNG streams and mutable collections."""

    def __init__(self, rngs: rnglib.Rngs, mutable: Any) -> None:
        self.rngs = rngs
        self.mutable = mutable

    def copy(self) -> "Scope":
        """A new Scope with the same rngs and mutable filter."""
        return Scope(self.rngs, self.mutable)


def _maybe_call_setup(module: Any) -> None:
    """Run ``module.setup()`` once, as the current module."""
    if not (isinstance(module, Module) and hasattr(module, "setup")):
        return
    if module._pytree__state.is_setup:
        return
    MODULE_CONTEXT.module_stack.append(ModuleStackEntry(module, in_compact=False))
    try:
        module.setup()  # type: ignore[attr-defined]
        module._pytree__state._is_setup = True
    finally:
        MODULE_CONTEXT.module_stack.pop()


def _bind_module(parent: "Module", module: "Module") -> "Module":
    """Give every bridge module under ``module`` (innermost first) the parent's scope and
    run its ``setup``."""
    assert parent.scope is not None
    for _, value in reversed(list(graphlib.iter_graph(module))):
        if isinstance(value, Module):
            if module.scope is None:
                value.scope = parent.scope.copy()
            _maybe_call_setup(value)
    return module


def current_context() -> ModuleStackEntry | None:
    """The innermost running bridge module's stack entry (``None`` outside any)."""
    return MODULE_CONTEXT.module_stack[-1]


def current_module() -> "Module | None":
    """The innermost running bridge module (``None`` outside any)."""
    ctx = current_context()
    return None if ctx is None else ctx.module


def _auto_submodule_name(parent_ctx: ModuleStackEntry, cls: type) -> str:
    """``{ClassName}_{n}``, ``n`` counting that class's submodules in this context."""
    index = parent_ctx.type_counter[cls]
    parent_ctx.type_counter[cls] += 1
    return f"{cls.__name__}_{index}"


class ModuleMeta(type(nnx_module.Module)):  # type: ignore[misc]
    """Metaclass of bridge modules: a module created while another runs becomes its
    child (named by ``name=`` or automatically inside ``compact``)."""

    def _pytree_meta_construct(cls, self: Any, *args: Any, **kwargs: Any) -> None:
        vars(self)["scope"] = None
        super()._pytree_meta_construct(self, *args, **kwargs)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        parent_ctx = MODULE_CONTEXT.module_stack[-1]
        parent = None
        name = None
        if parent_ctx is not None:
            if "parent" in kwargs:
                parent = kwargs.pop("parent")
                if parent_ctx.in_compact and parent is not None:
                    raise ValueError(
                        f"'parent' can only be set to None, got {type(parent).__name__}"
                    )
            else:
                parent = parent_ctx.module
            if "name" in kwargs:
                name = kwargs["name"]
                if "name" not in inspect.get_annotations(cls):
                    kwargs.pop("name")
                if not isinstance(name, str):
                    raise ValueError(f"'name' must be a 'str', got {type(name).__name__}")
            elif parent_ctx.in_compact:
                name = _auto_submodule_name(parent_ctx, cls)
        module = super().__call__(*args, **kwargs)
        module.scope = None
        module.attr_priorities = {}
        if parent is not None and name is not None:
            assert parent.scope is not None
            setattr(parent, name, module)
            parent.set_attr_priority(name, AttrPriority.INIT_PARENT)
        return module


class AttrPriority(enum.IntEnum):
    """Order of a module's attributes in its graph (lower first; ties by name), so that
    a submodule created by its parent's constructor is reached through the parent."""

    HIGH = 0
    INIT_PARENT = 20
    DEFAULT = 50
    LOW = 100


@tp.dataclass_transform(field_specifiers=(dataclasses.field,))
class Module(nnx_module.Module, metaclass=ModuleMeta):
    """Base class of bridge modules (see the module docstring).

    Attributes:
      scope: the ``Scope`` while bound (inside ``init``/``apply`` or under a bound
        parent), else ``None``.
      attr_priorities: per-attribute ``AttrPriority`` overrides.
    """

    if tp.TYPE_CHECKING:
        scope: Scope | None
        attr_priorities: dict[str, AttrPriority]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(pytree=False, **kwargs)
        dataclasses.dataclass(repr=False)(cls)
        cls.__hash__ = object.__hash__  # type: ignore[method-assign]

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if isinstance(value, ModuleState):
            raise AttributeError(name)
        return value

    def _setattr(self, name: str, value: Any) -> None:
        if vars(self).get("scope") is not None:
            pending = vars(self).get(name)
            if isinstance(pending, ModuleState):
                graphlib.update(value, pending)
            for leaf in jax.tree.leaves(value, is_leaf=graphlib.is_graph_node):
                if isinstance(leaf, Module):
                    leaf._pytree__state._initializing = self.is_initializing()
                    _bind_module(self, leaf)
        super()._setattr(name, value)

    def _graph_node_flatten(self) -> tuple[list[tuple[str, Any]], type]:
        priorities = vars(self).get("attr_priorities") or {}
        items = sorted(
            vars(self).items(),
            key=lambda kv: (priorities.get(kv[0], AttrPriority.DEFAULT), kv[0]),
        )
        return items, type(self)

    def set_attr_priority(self, name: str, value: AttrPriority) -> None:
        """Set the graph-order priority of attribute ``name``."""
        self.attr_priorities[name] = value

    def make_rng(self, name: str = "default") -> jax.Array:
        """A new key from the stream ``name`` of the bound scope's Rngs."""
        if self.scope is None:
            raise ValueError("Can't use RNGs on unbound modules")
        return self.scope.rngs[name]()

    def param(
        self,
        name: str,
        init_fn: Callable[..., A],
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> variablelib.Param:
        """The Param ``name``: the existing one, the loaded value (shape-checked against
        ``init_fn``'s), or a new one from ``init_fn(make_rng('params'), *init_args)``."""
        if self.scope is None:
            raise ValueError(
                "Parameters must be initialized in `setup()` or in a method wrapped in `@compact`"
            )
        if hasattr(self, name):
            value = getattr(self, name)
            if isinstance(value, variablelib.Variable):
                if not isinstance(value, variablelib.Param):
                    raise ValueError(f"Expected '{name}' to be a Param, got {type(value).__name__}")
                return value
            abstract = jax.eval_shape(lambda: init_fn(jax.random.key(0), *init_args, **init_kwargs))
            variable = variablelib.Param(_checked_value(name, value, abstract))
        else:
            variable = variablelib.Param(
                init_fn(self.make_rng("params"), *init_args, **init_kwargs)
            )
        setattr(self, name, variable)
        return variable

    def variable(
        self,
        col: str,
        name: str,
        init_fn: Callable[..., A] | None = None,
        *init_args: Any,
        unbox: bool = True,
        **init_kwargs: Any,
    ) -> variablelib.Variable:
        """The Variable ``name`` of collection ``col`` (its NNX type follows the name):
        existing, loaded (shape-checked) or new from ``init_fn(*init_args)``."""
        var_type = variablelib.variable_type_from_name(col, allow_register=True)
        if self.scope is None:
            raise ValueError(
                "Variables must be initialized in `setup()` or in a method wrapped in `@compact`"
            )
        if hasattr(self, name):
            value = getattr(self, name)
            if isinstance(value, variablelib.Variable):
                return value
            if init_fn is None:
                raise ValueError("Expected 'init_fn' to be a callable, got None")
            abstract = jax.eval_shape(lambda: init_fn(*init_args, **init_kwargs))
            variable = var_type(_checked_value(name, value, abstract))
        else:
            if init_fn is None:
                raise ValueError("Expected 'init_fn' to be a callable, got None")
            variable = var_type(init_fn(*init_args, **init_kwargs))
        setattr(self, name, variable)
        return variable

    def _get_variables(self) -> dict[str, Any]:
        """The module's Variables (RNG state excepted) as a Linen variables dict."""
        flat: dict[str, dict[tuple[Any, ...], Any]] = {}
        for path, variable in statelib.to_flat_state(graphlib.state(self)):
            if isinstance(variable, rnglib.RngState):
                continue
            try:
                collection = variablelib.variable_name_from_type(type(variable))
            except ValueError:
                collection = type(variable).__name__
            if bridge_variables.is_vanilla_variable(variable):
                leaf = variable.get_value()
            else:
                leaf = bridge_variables.to_linen_var(variable)
            flat.setdefault(collection, {})[tuple(path)] = leaf
        return {c: traversals.unflatten_mapping(f) for c, f in flat.items()}

    @property
    def variables(self) -> FrozenDict:
        """The Linen variables dict of this module (a FrozenDict)."""
        return FrozenDict(self._get_variables())

    def apply(
        self,
        variables: Mapping[str, Mapping[str, Any]],
        *args: Any,
        rngs: Any = None,
        method: Callable[..., Any] | str = "__call__",
        mutable: Any = False,
        _initialize: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``method`` on a copy of this module loaded with ``variables``, as Linen's
        ``apply``; with ``mutable`` also return the new variables dict."""
        module = graphlib.clone(self)
        loaded = {
            col: jax.tree.map(
                functools.partial(bridge_variables.to_nnx_var, col),
                collection,
                is_leaf=lambda x: isinstance(x, meta.AxisMetadata),
            )
            for col, collection in variables.items()
        }
        states = list(loaded.values()) or [{}]
        graphlib.update(module, statelib.merge_state(*states, cls=ModuleState))
        run = _get_unbound_fn(_resolve_method(module, method))
        _bind_all(module, _as_rngs(rngs), mutable, _initialize)
        MODULE_CONTEXT.module_stack.append(ModuleStackEntry(module, in_compact=False))
        try:
            out = run(module, *args, **kwargs)
        finally:
            MODULE_CONTEXT.module_stack.pop()
            _unbind_all(module)
        if mutable is False:
            return out
        return out, module._get_variables()

    def init(
        self,
        rngs: Any = None,
        *args: Any,
        method: Callable[..., Any] | str = "__call__",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The variables dict created by running ``method`` in initializing mode."""
        _, variables = self.apply(
            {}, *args, _initialize=True, mutable=True, rngs=rngs, method=method, **kwargs
        )
        return variables

    def init_with_output(
        self,
        rngs: Any = None,
        *args: Any,
        method: Callable[..., Any] | str = "__call__",
        mutable: Any = False,
        **kwargs: Any,
    ) -> tuple[Any, dict[str, Any]]:
        """``(output, variables)`` of running ``method`` in initializing mode."""
        return self.apply(
            {}, *args, rngs=rngs, method=method, mutable=True, _initialize=True, **kwargs
        )

    def is_initializing(self) -> bool:
        """Whether the module runs inside ``init`` (or a ``lazy_init``)."""
        return self._pytree__state._initializing


def _checked_value(name: str, value: Any, abstract: Any) -> Any:
    """``value`` after checking its leaves' shapes against ``abstract``'s (Linen's
    ScopeParamShapeError otherwise); an initializer returning Variable metadata keeps it
    around the loaded value."""
    for val, abs_val in zip(jax.tree.leaves(value), jax.tree.leaves(abstract)):
        if np.shape(val) != np.shape(abs_val):
            raise errors.ScopeParamShapeError(name, "", np.shape(abs_val), np.shape(val))
    metadata_type = getattr(variablelib, "VariableMetadata", None)
    if metadata_type is not None and isinstance(abstract, metadata_type):
        abstract.raw_value = value
        return abstract
    return value


def _as_rngs(rngs: Any) -> rnglib.Rngs:
    if rngs is None:
        return rnglib.Rngs()
    if isinstance(rngs, (jax.Array, int)):
        return rnglib.Rngs(rngs)
    if isinstance(rngs, dict):
        return rnglib.Rngs(**rngs)
    return rngs


def _resolve_method(module: "Module", method: Callable[..., Any] | str) -> Callable[..., Any]:
    if not isinstance(method, str):
        return method
    found = getattr(module, method)
    if not callable(found):
        raise TypeError(
            f"'{type(module).__name__}.{method}' must be a callable, got {type(found)}."
        )
    if isinstance(found, Module):
        return lambda module, *args, **kwargs: getattr(module, method)(*args, **kwargs)
    return found


def _bind_all(module: "Module", rngs: rnglib.Rngs, mutable: Any, initializing: bool) -> None:
    for _, value in graphlib.iter_graph(module):
        if isinstance(value, pytreelib.Pytree):
            value._pytree__state._initializing = initializing
        if isinstance(value, Module):
            value.scope = Scope(rngs, mutable)
            _maybe_call_setup(value)


def _unbind_all(module: "Module") -> None:
    for _, value in graphlib.iter_graph(module):
        if isinstance(value, pytreelib.Pytree):
            value._pytree__state._initializing = False
        if isinstance(value, Module):
            value.scope = None


def compact(f: F) -> F:
    """Mark a bridge module method in which submodules and variables are declared inline
    (submodules get automatic names)."""

    @functools.wraps(f)
    def compact_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, Module):
            raise ValueError(
                f"Expected 'self' to be a nnx.bridge.Module, got {type(self).__name__}"
            )
        MODULE_CONTEXT.module_stack.append(ModuleStackEntry(self, in_compact=True))
        try:
            return f(self, *args, **kwargs)
        finally:
            MODULE_CONTEXT.module_stack.pop()

    return compact_wrapper  # type: ignore[return-value]


def _get_unbound_fn(method_or_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function behind a bound bridge-module method; it must take ``self``."""
    if inspect.ismethod(method_or_fn) and isinstance(method_or_fn.__self__, Module):
        method_or_fn = method_or_fn.__func__
    if not callable(method_or_fn) or len(inspect.signature(method_or_fn).parameters) < 1:
        raise errors.ApplyModuleInvalidMethodError(method_or_fn)
    return method_or_fn
