"""NNX Variables: mutable pytreemod Variables with metadata (``flax.nnx.variablelib``).

``nnx.Variable`` is a ``pm.Variable`` and ``nnx.Param``/``BatchStat``/``Cache``/
``Intermediate`` are ``pm.Param``/``pm.BatchStat``/``pm.Cache``/``pm.Intermediate``, so
pytreemod's filters select them by type or collection name as they select pytreemod's own.
What NNX adds, as Flax 0.12.8 has it:

- the box is mutable: ``v[...] = x``, ``v.set_value(x)`` (``v.value`` still works but is
  deprecated in Flax), ``v[i] = x`` writes a slice;
- it carries metadata (``Param(x, out_sharding=...)``), always including the three
  required entries ``hijax``, ``ref`` and ``eager_sharding``;
- it is a pytree whose one child is the value (key ``GetAttrKey('value')``) and whose aux
  data is the sorted metadata, so ``jax.tree.map`` keeps the metadata;
- ``ref=True`` keeps the value in a ``jax.Ref`` (``jax.new_ref``), read and written in place;
- it may only be mutated in the JAX trace it was created in (``TraceContextError``).

``var_defaults(hijax=, ref=)`` and ``use_eager_sharding`` set the defaults of new Variables.
``HijaxVariable`` is, here, the type of Variables created with ``hijax=True``: they carry
the flag and may be mutated from any trace, but are not JAX "hijax" types (see
``HijaxVariable``).
"""

import dataclasses
import functools
import os
import sys
import threading
import typing as tp
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.ref
import jax.tree_util as jtu
import numpy as np

import pytreemod as pm
from adapters import errors
from adapters.config import config
from adapters.core import spmd as core_spmd
from adapters.typing import MISSING, Missing

from . import reprlib, tracers

A = tp.TypeVar("A")
F = tp.TypeVar("F", bound=Callable[..., Any])

GetValueHook = Callable[["Variable", Any], Any]
SetValueHook = Callable[["Variable", Any], Any]
CreateValueHook = Callable[["Variable", Any], Any]
AxisName = str
AxisIndex = int
AddAxisHook = Callable[["Variable", AxisIndex, AxisName | None], None]
RemoveAxisHook = Callable[["Variable", AxisIndex, AxisName | None], None]

Ref = jax.Ref
"""JAX's mutable array type (``jax.new_ref`` makes one)."""

_HOOKS = ("on_get_value", "on_set_value", "on_create_value", "on_add_axis", "on_remove_axis")


# --------------------------------------------------------------------------------------
# Defaults of new Variables: var_defaults(hijax=, ref=) and use_eager_sharding
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class VariableContext(threading.local):
    """Per thread: the stacks of the defaults set by ``var_defaults``/``use_eager_sharding``."""

    variable_hijax_stack: list[bool] = dataclasses.field(default_factory=list)
    variable_ref_stack: list[bool] = dataclasses.field(default_factory=list)
    eager_shard_stack: list[bool] = dataclasses.field(default_factory=list)


VARIABLE_CONTEXT = VariableContext()


class _StackSetting:
    """A setting kept on a stack: ``setting(v)`` sets it at once (replacing the top);
    used as a context manager it restores the previous value on exit; used as a decorator
    it undoes the change and applies ``v`` only while the decorated function runs."""

    def __init__(self, stack: list[bool], value: bool) -> None:
        self._stack = stack
        self._new = value
        self._prev: bool | None = stack[-1] if stack else None
        if stack:
            stack[-1] = value
        else:
            stack.append(value)

    def __enter__(self) -> None:
        if self._prev is not None:
            self._stack.insert(-1, self._prev)

    def __exit__(self, *exc: object) -> None:
        self._stack.pop()

    def __call__(self, f: F) -> F:
        self._stack.pop()
        if self._prev is not None:
            self._stack.append(self._prev)

        @functools.wraps(f)
        def with_setting(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(self._new)
            try:
                return f(*args, **kwargs)
            finally:
                self._stack.pop()

        return tp.cast(F, with_setting)


class use_eager_sharding(_StackSetting):
    """Whether new Variables with ``out_sharding`` metadata are sharded when created.

    ``nnx.use_eager_sharding(False)`` changes the default at once; ``with
    nnx.use_eager_sharding(True): ...`` changes it for a block; as a decorator, for the
    calls of one function. The global default is ``config.flax_always_shard_variable``.
    """

    def __init__(self, value: bool, /) -> None:
        super().__init__(VARIABLE_CONTEXT.eager_shard_stack, value)

    @classmethod
    def current_value(cls) -> bool:
        """The setting in force now."""
        stack = VARIABLE_CONTEXT.eager_shard_stack
        return stack[-1] if stack else bool(config.flax_always_shard_variable)


def using_eager_sharding() -> bool:
    """Whether new Variables are sharded eagerly by default (see ``use_eager_sharding``)."""
    return use_eager_sharding.current_value()


@dataclasses.dataclass(frozen=True)
class VarDefaults(Mapping[str, Any]):
    """The defaults of new Variables in force now (``nnx.var_defaults()``)."""

    hijax: bool
    ref: bool

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in dataclasses.fields(self))

    def __len__(self) -> int:
        return len(dataclasses.fields(self))


class VarDefaultsContext:
    """What ``var_defaults(hijax=..., ref=...)`` returns: the change is already made; as a
    context manager it is undone on exit, as a decorator it applies only inside the call."""

    def __init__(self, settings: list[_StackSetting]) -> None:
        self._settings = settings

    def __enter__(self) -> None:
        for s in self._settings:
            s.__enter__()

    def __exit__(self, *exc: object) -> None:
        for s in reversed(self._settings):
            s.__exit__(*exc)

    def __call__(self, f: F) -> F:
        for s in reversed(self._settings):
            f = s(f)
        return f


def _current_defaults() -> VarDefaults:
    hijax_stack = VARIABLE_CONTEXT.variable_hijax_stack
    ref_stack = VARIABLE_CONTEXT.variable_ref_stack
    return VarDefaults(
        hijax=hijax_stack[-1] if hijax_stack else bool(config.flax_hijax_variable),
        ref=ref_stack[-1] if ref_stack else False,
    )


@tp.overload
def var_defaults() -> VarDefaults: ...


@tp.overload
def var_defaults(*, hijax: bool, ref: bool | None = None) -> VarDefaultsContext: ...


@tp.overload
def var_defaults(*, hijax: bool | None = None, ref: bool) -> VarDefaultsContext: ...


def var_defaults(
    *, hijax: bool | None = None, ref: bool | None = None
) -> VarDefaults | VarDefaultsContext:
    """With no argument, the defaults of new Variables (``var_defaults().hijax``); with
    ``hijax=``/``ref=``, set them (at once, for a ``with`` block, or for a decorated
    function)."""
    ctx = VARIABLE_CONTEXT
    if hijax is None and ref is None:
        return _current_defaults()
    settings = []
    if hijax is not None:
        settings.append(_StackSetting(ctx.variable_hijax_stack, hijax))
    if ref is not None:
        settings.append(_StackSetting(ctx.variable_ref_stack, ref))
    return VarDefaultsContext(settings)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def is_array_ref(x: Any) -> bool:
    """Whether ``x`` is a ``jax.Ref`` (a mutable array), concrete or traced."""
    if isinstance(x, Ref):
        return True
    return isinstance(x, jax.Array) and isinstance(jax.typeof(x), jax.ref.AbstractRef)


def _copy_tree(x: Any) -> Any:
    """A copy of the containers of ``x`` (the leaves are shared)."""
    return jax.tree.map(lambda leaf: leaf, x)


def _run_hooks(hooks: Any, *args: Any) -> Any:
    """Run one hook or a tuple of hooks, threading the value (``args[1]``) through."""
    variable, value, *rest = args
    for hook in hooks if isinstance(hooks, tuple) else (hooks,):
        out = hook(variable, value, *rest)
        if not rest:
            value = out
    return value


def _remap_sharding_metadata(metadata: dict[str, Any]) -> None:
    """Rename the deprecated ``sharding``/``sharding_names`` entries to ``out_sharding``."""
    for old in ("sharding", "sharding_names"):
        if old in metadata:
            warnings.warn(
                f"'{old}' is deprecated, use 'out_sharding' instead.",
                DeprecationWarning,
                stacklevel=4,
            )
            metadata["out_sharding"] = metadata.pop(old)


def _size_comment(value: Any) -> str:
    """`` # 6 (24 B)``: the element count and bytes of the arrays in ``value``."""
    size = nbytes = 0
    for leaf in jax.tree.leaves(value):
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            n = int(np.prod(leaf.shape))
            size += n
            dtype = np.dtype(leaf.dtype) if isinstance(leaf.dtype, str) else leaf.dtype
            nbytes += n * int(getattr(dtype, "itemsize", 0))
    if not size:
        return ""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if nbytes > scale:
            return f" # {size:,} ({nbytes / scale:,.1f} {unit})"
    return f" # {size:,} ({nbytes:,} B)"


def _shown_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a repr shows: the required entries only where not at their default."""
    defaults = {
        "hijax": config.flax_hijax_variable,
        "ref": False,
        "eager_sharding": config.flax_always_shard_variable,
    }
    return {k: v for k, v in metadata.items() if not (k in defaults and v == defaults[k])}


@dataclasses.dataclass
class VariableMetadata(tp.Generic[A]):
    """A value with the metadata and hooks a Variable built from it gets
    (``nnx.with_metadata`` initializers return one)."""

    raw_value: A
    on_set_value: tuple[SetValueHook, ...] = ()
    on_get_value: tuple[GetValueHook, ...] = ()
    on_create_value: tuple[CreateValueHook, ...] = ()
    on_add_axis: tuple[AddAxisHook, ...] = ()
    on_remove_axis: tuple[RemoveAxisHook, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


# --------------------------------------------------------------------------------------
# Variable
# --------------------------------------------------------------------------------------


def _flatten_with_keys(v: Any) -> tuple[tuple[tuple[Any, Any]], tuple[Any, ...]]:
    return ((jtu.GetAttrKey("value"), v._raw_value),), tuple(sorted(v._var_metadata.items()))


def _flatten(v: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
    return (v._raw_value,), tuple(sorted(v._var_metadata.items()))


def _binary_op(name: str) -> Callable[["Variable", Any], Any]:
    def op(self: "Variable", other: Any) -> Any:
        if isinstance(other, Variable):
            other = other.get_value()
        return getattr(self.get_value(), name)(other)

    op.__name__ = name
    return op


def _unary_op(name: str) -> Callable[["Variable"], Any]:
    def op(self: "Variable") -> Any:
        return getattr(self.get_value(), name)()

    op.__name__ = name
    return op


def _no_inplace(name: str, spelled: str) -> Callable[["Variable", Any], Any]:
    def op(self: "Variable", other: Any) -> Any:
        raise NotImplementedError(
            f"In-place operations are no longer supported for Variable.\nUse `{spelled}` instead."
        )

    op.__name__ = name
    return op


class VariableMeta(type):
    """Metaclass of Variables: every subclass gets ``__slots__ = ()`` unless it says
    otherwise (a Variable keeps its state in three slots, never in a ``__dict__``)."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> "VariableMeta":
        attrs.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, attrs, **kwargs)


def _unflatten(cls: type["Variable[Any]"], static: tuple[Any, ...], children: Any) -> Any:
    return cls._new(children[0], dict(static))


class _NNXPytree:
    """Mixin before ``pm.Variable`` in the bases: its ``__init_subclass__`` takes the place
    of ``pm.Variable``'s (same ``collection=`` rule), registering NNX's pytree (the value
    under ``GetAttrKey('value')``, the sorted metadata as aux data) instead of pytreemod's
    value-only one."""

    __slots__ = ()
    collection: ClassVar[str]

    def __init_subclass__(cls, collection: str | None = None, **kwargs: Any) -> None:
        super(pm.Variable, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        cls.collection = collection if collection is not None else cls.__name__
        jtu.register_pytree_with_keys(
            cls,
            _flatten_with_keys,
            functools.partial(_unflatten, cls),  # type: ignore[arg-type]
            _flatten,
        )


class Variable(
    _NNXPytree,
    pm.Variable[A],
    reprlib.Representable,
    metaclass=VariableMeta,
    collection="variables",
):
    """A mutable box around one value (usually an array) with metadata.

    Subclass it to make a new kind of state (``class Count(nnx.Variable): pass``); NNX's
    graph functions filter by Variable type (``nnx.state(model, nnx.Param)``). A subclass
    names its own pytreemod collection (its class name, unless ``collection=`` says).
    """

    __slots__ = ("_raw_value", "_trace_state", "_var_metadata")
    _raw_value: A
    _trace_state: tracers.TraceState
    _var_metadata: dict[str, Any]
    required_metadata: ClassVar[frozenset[str]] = frozenset(["hijax", "ref", "eager_sharding"])

    def __init__(
        self,
        value: "A | VariableMetadata[A]",
        *,
        hijax: bool | None = None,
        ref: bool | None = None,
        eager_sharding: bool | None = None,
        **metadata: Any,
    ) -> None:
        if isinstance(value, VariableMetadata):
            hijax, ref, eager_sharding, value = _take_variable_metadata(
                value, metadata, hijax, ref, eager_sharding
            )
        defaults = _current_defaults()
        hijax = defaults.hijax if hijax is None else hijax
        ref = defaults.ref if ref is None else ref
        eager_sharding = using_eager_sharding() if eager_sharding is None else eager_sharding
        if any(is_array_ref(leaf) for leaf in jax.tree.leaves(value)):
            raise ValueError("Cannot pass a Ref directly into Variable constructor.")
        metadata.update(hijax=hijax, ref=ref, eager_sharding=eager_sharding)
        object.__setattr__(self, "_trace_state", tracers.TraceState())
        object.__setattr__(self, "_var_metadata", metadata)
        object.__setattr__(self, "_raw_value", value)
        for hook in _HOOKS:  # hooks defined as methods of a subclass
            if hasattr(type(self), hook) and hook not in metadata:
                metadata[hook] = getattr(type(self), hook)
        _remap_sharding_metadata(metadata)
        if any(metadata.get(k) for k in _HOOKS):
            warnings.warn(
                "Variable hooks are deprecated. Create your own Variable type and "
                "overload `get_value` and `set_value` instead.",
                stacklevel=2,
            )
        if "on_create_value" in metadata:
            value = _run_hooks(metadata["on_create_value"], self, value)
        object.__setattr__(self, "_raw_value", value)
        value = self.create_value(tp.cast(A, value))
        if eager_sharding and "out_sharding" in metadata:
            value = core_spmd.shard_value(
                value,
                metadata["out_sharding"],
                metadata.get("sharding_rules"),
                metadata.get("mesh"),
            )
        object.__setattr__(self, "_raw_value", jax.new_ref(value) if ref else value)

    # -- properties ------------------------------------------------------------------

    @property
    def var_type(self) -> type["Variable[A]"]:
        """The Variable's class."""
        return type(self)

    @property
    def type(self) -> type["Variable[A]"]:
        """The Variable's class (kept from the old ``VariableState`` API)."""
        return type(self)

    @property
    def hijax(self) -> bool:
        """The ``hijax`` metadata flag."""
        return self._var_metadata["hijax"]

    @property
    def ref(self) -> bool:
        """Whether the value lives in a ``jax.Ref``."""
        return self._var_metadata["ref"]

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape."""
        return self.get_value().shape  # type: ignore[attr-defined]

    @property
    def sharding_names(self) -> Any:
        """Deprecated: the ``out_sharding`` metadata."""
        warnings.warn(
            "'sharding_names' is deprecated, use 'out_sharding' instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.get_metadata("out_sharding", None)

    @property
    def _can_update(self) -> bool:
        """Whether the Variable may be mutated in the current JAX trace."""
        return self.hijax or self._trace_state.is_valid()

    def _check_can_update(self) -> None:
        if not self.hijax and not self._trace_state.is_valid():
            raise errors.TraceContextError(
                f"Cannot mutate {type(self).__name__} from a different trace level"
            )

    # -- attribute protocol: metadata first, then the value's attributes -------------

    def __getattr__(self, name: str) -> Any:
        try:
            metadata = object.__getattribute__(self, "_var_metadata")
            raw = object.__getattribute__(self, "_raw_value")
        except AttributeError:  # not initialised yet (copy, unpickling)
            raise AttributeError(name) from None
        if name in metadata:
            return metadata[name]
        return getattr(raw, name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._check_can_update()
        try:
            object.__setattr__(self, name, value)
        except AttributeError as e:
            raise AttributeError(
                f"Cannot set attribute {name}. "
                f"To set Variable metadata use either:\n\n"
                f"  variable.set_metadata({name}=value)\n\nor\n\n"
                f"  variable.set_metadata('{name}', value)"
            ) from e

    def __delattr__(self, name: str) -> None:
        self._check_can_update()
        try:
            object.__delattr__(self, name)
        except AttributeError as e:
            raise AttributeError(
                f"Cannot delete attribute {name}. "
                f"To delete Variable metadata use:\n\n"
                f"  variable.del_metadata('{name}')"
            ) from e

    # -- metadata --------------------------------------------------------------------

    def get_metadata(
        self,
        name: str | None = None,
        default: Any = MISSING,
        *,
        exclude_required: bool | None = None,
    ) -> Any:
        """A copy of the metadata dict (without ``hijax``/``ref``/``eager_sharding`` if
        ``exclude_required``), or the entry ``name`` (``default`` if absent, else
        ``KeyError``)."""
        if name is not None and exclude_required is not None:
            raise TypeError("Cannot specify both 'name' and 'exclude_required' arguments.")
        metadata = self._var_metadata.copy()
        if name is None:
            if not isinstance(default, Missing):
                raise TypeError(
                    "Cannot provide a default value when 'name' is not provided. "
                    f"Got default={default}"
                )
            if exclude_required:
                for key in self.required_metadata:
                    metadata.pop(key, None)
            return metadata
        if name not in metadata and not isinstance(default, Missing):
            return default
        return metadata[name]

    def set_metadata(self, *args: Any, **kwargs: Any) -> None:
        """``set_metadata(dict)`` replaces all metadata, ``set_metadata(name, value)`` sets
        one entry, ``set_metadata(**entries)`` updates entries. ``hijax`` and ``ref`` (and,
        with a whole dict, ``eager_sharding``) cannot change."""
        self._check_can_update()
        if args and kwargs:
            raise TypeError("Cannot mix positional and keyword arguments in set_metadata")
        if len(args) == 1:
            metadata = dict(args[0])
            _remap_sharding_metadata(metadata)
            for key in ("hijax", "ref", "eager_sharding"):
                metadata.setdefault(key, self._var_metadata[key])
                self._check_unchanged(key, metadata[key])
            object.__setattr__(self, "_var_metadata", metadata)
        elif len(args) == 2:
            name, value = args
            if name in ("sharding", "sharding_names"):
                warnings.warn(
                    f"'{name}' is deprecated, use 'out_sharding' instead.",
                    DeprecationWarning,
                    stacklevel=2,
                )
                name = "out_sharding"
            if name in ("hijax", "ref"):
                self._check_unchanged(name, value)
            self._var_metadata[name] = value
        elif kwargs and not args:
            _remap_sharding_metadata(kwargs)
            for key in ("hijax", "ref"):
                if key in kwargs:
                    self._check_unchanged(key, kwargs[key])
            self._var_metadata.update(kwargs)
        else:
            raise TypeError(
                "set_metadata takes either 1 or 2 arguments, or at least 1 keyword argument, "
                f"got args={args}, kwargs={kwargs}"
            )

    def _check_unchanged(self, key: str, value: Any) -> None:
        current = self._var_metadata[key]
        if value != current:
            raise ValueError(f"Cannot change `{key}` metadata, expected {current}, got {value}")

    def has_metadata(self, name: str) -> bool:
        """Whether the metadata has an entry ``name``."""
        return name in self._var_metadata

    def del_metadata(self, name: str) -> None:
        """Delete the metadata entry ``name`` (``hijax`` and ``ref`` cannot go)."""
        self._check_can_update()
        if name in ("hijax", "ref"):
            raise ValueError(f"Cannot delete `{name}` metadata")
        del self._var_metadata[name]

    # -- value -----------------------------------------------------------------------

    def copy_from(self, other: "Variable[A]") -> None:
        """Take ``other``'s value and metadata (same type required)."""
        if type(self) is not type(other):
            raise ValueError(
                f"Cannot copy from incompatible container, "
                f"expected {type(self).__name__}, got {type(other).__name__}"
            )
        if self is other:
            return
        self._raw_value = other._raw_value
        self._var_metadata.clear()
        self._var_metadata.update(other.get_metadata())

    def update_from_state(self, variable_state: "Variable[A]") -> None:
        """Take the raw value and metadata of ``variable_state``, keeping ``hijax``/``ref``."""
        self._raw_value = variable_state._raw_value
        if self._var_metadata != variable_state._var_metadata:
            metadata = variable_state.get_metadata()
            metadata["hijax"] = self.hijax
            metadata["ref"] = self.ref
            object.__setattr__(self, "_var_metadata", metadata)

    @tp.final
    def get_raw_value(self) -> A:
        """The stored value as is (a ``jax.Ref`` for ``ref=True``), bypassing hooks."""
        return self._raw_value

    def set_raw_value(self, value: A, *, _unsafe_bypass_check: bool = False) -> None:
        """Store ``value`` as is, bypassing hooks and ``set_value``."""
        if not _unsafe_bypass_check:
            self._check_can_update()
        object.__setattr__(self, "_raw_value", value)

    @property
    def raw_value(self) -> A:
        """Deprecated: ``get_raw_value()``."""
        warnings.warn(
            "'.raw_value' access is now deprecated. Use:\n\n  variable.get_raw_value()\n",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.get_raw_value()

    @raw_value.setter
    def raw_value(self, value: A) -> None:
        warnings.warn(
            "'.raw_value' setter is now deprecated. Use:\n\n  variable.set_raw_value(value)\n",
            DeprecationWarning,
            stacklevel=2,
        )
        self.set_raw_value(value)

    @property
    def value(self) -> A:  # pyright: ignore[reportIncompatibleVariableOverride]
        """Deprecated in Flax: ``v[...]`` for arrays, ``v.get_value()`` otherwise."""
        if not _internal_caller():
            warnings.warn(
                "'.value' access is now deprecated. For Variable[Array] instances use:\n\n"
                "  variable[...]\n\nFor other Variable types use:\n\n  variable.get_value()\n",
                DeprecationWarning,
                stacklevel=2,
            )
        return self.get_value()

    @value.setter
    def value(self, value: A) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        if not _internal_caller():
            warnings.warn(
                "'.value' setter is now deprecated. For Variable[Array] instances use:\n\n"
                "  variable[...] = value\n\nFor other Variable types use:\n\n"
                "  variable.set_value(value)\n",
                DeprecationWarning,
                stacklevel=2,
            )
        self.set_value(value)

    def create_value(self, value: A) -> A:
        """Override to transform the value when the Variable is created."""
        return value

    def get_value(self, *, index: Any = MISSING) -> A:
        """The value (or ``value[index]``), after the ``on_get_value`` hooks."""
        value = _copy_tree(self._raw_value)
        if not isinstance(index, Missing):
            if not (isinstance(value, jax.Array) and not is_array_ref(value) and index is ...):
                value = value[index]
        elif is_array_ref(value):
            value = value[...]
        if "on_get_value" in self._var_metadata:
            value = _run_hooks(self._var_metadata["on_get_value"], self, value)
        return tp.cast(A, value)

    def set_value(self, value: A, *, index: Any = MISSING) -> None:
        """Replace the value (or write ``value`` at ``index``), after ``on_set_value``."""
        value = _copy_tree(value)
        if "on_set_value" in self._var_metadata:
            value = _run_hooks(self._var_metadata["on_set_value"], self, value)
        raw = self._raw_value
        if is_array_ref(raw):
            raw[... if isinstance(index, Missing) else index] = value  # type: ignore[index]
        elif isinstance(raw, jax.Array) and not isinstance(index, Missing):
            if index is ... and _same_array_type(value, raw):
                self._raw_value = value
            else:
                self._raw_value = raw.at[index].set(value)  # type: ignore[assignment]
        elif isinstance(index, Missing):
            self._raw_value = value
        else:
            raw[index] = value  # type: ignore[index]

    def add_axis(self, axis_index: AxisIndex, axis_name: AxisName | None) -> None:
        """Run the ``on_add_axis`` hooks (a transform added an axis to the value)."""
        if "on_add_axis" in self._var_metadata:
            _run_hooks(self._var_metadata["on_add_axis"], self, axis_index, axis_name)

    def remove_axis(self, axis_index: AxisIndex, axis_name: AxisName | None) -> None:
        """Run the ``on_remove_axis`` hooks (a transform removed an axis of the value)."""
        if "on_remove_axis" in self._var_metadata:
            _run_hooks(self._var_metadata["on_remove_axis"], self, axis_index, axis_name)

    def copy(self, value: Any = MISSING, *, _copy_ref: bool = True, **updates: Any) -> Any:
        """A new Variable of the same type: ``value`` (or the current raw value) with the
        metadata updated by ``updates``. A ``ref`` Variable gets a new ``jax.Ref``."""
        if "raw_value" in updates:
            raise TypeError("copy() takes the value as `value`, not `raw_value`")
        metadata = self.get_metadata() | updates
        if isinstance(value, Missing):
            value = metadata.pop("value") if "value" in updates else self.get_raw_value()
        if _copy_ref and is_array_ref(value):
            value = value[...]
        if _copy_ref and metadata["ref"]:
            value = jax.new_ref(value)
        return self.from_metadata(_copy_tree(value), metadata)

    def replace(self, value: Any = MISSING, **updates: Any) -> Any:
        """Same as ``copy``."""
        return self.copy(value, **updates)

    def to_state(self, value: Any = MISSING, **updates: Any) -> Any:
        """Same as ``copy`` (kept from the old ``VariableState`` API)."""
        return self.copy(value, **updates)

    @classmethod
    def _new(cls, value: Any, metadata: dict[str, Any]) -> "Variable[Any]":
        obj = object.__new__(cls)
        object.__setattr__(obj, "_trace_state", tracers.TraceState())
        object.__setattr__(obj, "_var_metadata", metadata)
        object.__setattr__(obj, "_raw_value", value)
        return obj

    @classmethod
    def from_metadata(cls, value: Any, attributes: Mapping[str, Any]) -> "Variable[Any]":
        """A new ``cls`` holding ``value`` with the metadata ``attributes`` (no hooks, no
        checks)."""
        return cls._new(value, dict(attributes))

    # -- repr ------------------------------------------------------------------------

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type=type(self).__name__, comment=_size_comment(self._raw_value))
        yield reprlib.Attr("value", self.get_value())
        for name, value in _shown_metadata(self._var_metadata).items():
            yield reprlib.Attr(name, value)

    def __treescope_repr__(self, path: Any, subtree_renderer: Any) -> Any:
        import treescope  # optional: only needed to render

        children = {"value": self.get_value(), **_shown_metadata(self._var_metadata)}
        return treescope.repr_lib.render_object_constructor(
            object_type=type(self),
            attributes=children,
            path=path,
            subtree_renderer=subtree_renderer,
        )

    def __repr__(self) -> str:
        return reprlib.Representable.__repr__(self)

    def __str__(self) -> str:
        return reprlib.Representable.__str__(self)

    def __jax_array__(self) -> Any:
        return self.get_value()

    def __getstate__(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "_raw_value": self._raw_value,
            "_trace_state": self._trace_state,
            "_var_metadata": self._var_metadata,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in ("_trace_state", "_var_metadata", "_raw_value"):
            object.__setattr__(self, name, state[name])

    # pytreemod's functional get/set become the in-place ones: an NNX Variable is mutable.
    def get(self) -> A:
        """Same as ``get_value()``."""
        return self.get_value()

    def set(self, value: A) -> None:
        """Same as ``set_value(value)``."""
        self.set_value(value)

    # -- container and operator protocol (on the value) -------------------------------

    def __getitem__(self, key: Any) -> Any:
        return self.get_value(index=key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.set_value(value, index=key)

    def __delitem__(self, key: Any) -> None:
        value = self.get_value()
        del value[key]  # type: ignore[attr-defined]
        self.set_value(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.get_value()(*args, **kwargs)  # type: ignore[operator]

    def __len__(self) -> int:
        return len(self.get_value())  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get_value())  # type: ignore[call-overload]

    def __contains__(self, item: Any) -> bool:
        return item in self.get_value()  # type: ignore[operator]

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        if isinstance(other, Variable):
            other = other.get_value()
        return self.get_value().__eq__(other)

    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __round__(self, ndigits: int = 0) -> Any:
        return self.get_value().__round__(ndigits)  # type: ignore[attr-defined]

    __add__ = _binary_op("__add__")
    __sub__ = _binary_op("__sub__")
    __mul__ = _binary_op("__mul__")
    __matmul__ = _binary_op("__matmul__")
    __truediv__ = _binary_op("__truediv__")
    __floordiv__ = _binary_op("__floordiv__")
    __mod__ = _binary_op("__mod__")
    __pow__ = _binary_op("__pow__")
    __lshift__ = _binary_op("__lshift__")
    __rshift__ = _binary_op("__rshift__")
    __and__ = _binary_op("__and__")
    __xor__ = _binary_op("__xor__")
    __or__ = _binary_op("__or__")
    __radd__ = _binary_op("__radd__")
    __rsub__ = _binary_op("__rsub__")
    __rmul__ = _binary_op("__rmul__")
    __rmatmul__ = _binary_op("__rmatmul__")
    __rtruediv__ = _binary_op("__rtruediv__")
    __rfloordiv__ = _binary_op("__rfloordiv__")
    __rmod__ = _binary_op("__rmod__")
    __rpow__ = _binary_op("__rpow__")
    __rlshift__ = _binary_op("__rlshift__")
    __rrshift__ = _binary_op("__rrshift__")
    __rand__ = _binary_op("__rand__")
    __rxor__ = _binary_op("__rxor__")
    __ror__ = _binary_op("__ror__")

    __neg__ = _unary_op("__neg__")
    __pos__ = _unary_op("__pos__")
    __abs__ = _unary_op("__abs__")
    __invert__ = _unary_op("__invert__")
    __complex__ = _unary_op("__complex__")
    __int__ = _unary_op("__int__")
    __float__ = _unary_op("__float__")
    __index__ = _unary_op("__index__")
    __trunc__ = _unary_op("__trunc__")
    __floor__ = _unary_op("__floor__")
    __ceil__ = _unary_op("__ceil__")

    # Flax removed in-place operators: `v += 1` would rebind the name to an array.
    __iadd__ = _no_inplace("__iadd__", "variable[...] += x")
    __isub__ = _no_inplace("__isub__", "variable[...] -= x")
    __imul__ = _no_inplace("__imul__", "variable[...] *= x")
    __imatmul__ = _no_inplace("__imatmul__", "variable.value @= x")
    __itruediv__ = _no_inplace("__itruediv__", "variable.value /= x")
    __ifloordiv__ = _no_inplace("__ifloordiv__", "variable.value //= x`")
    __imod__ = _no_inplace("__imod__", "variable.value %= x")
    __ipow__ = _no_inplace("__ipow__", "variable.value **= x`")
    __ilshift__ = _no_inplace("__ilshift__", "variable.value <<= x`")
    __irshift__ = _no_inplace("__irshift__", "variable.value >>= x`")
    __iand__ = _no_inplace("__iand__", "variable.value &= x")
    __ixor__ = _no_inplace("__ixor__", "variable.value ^= x")
    __ior__ = _no_inplace("__ior__", "variable.value |= x")


_LIBRARY_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (pm, sys.modules["adapters"]) if m.__file__
)


def _internal_caller() -> bool:
    """Whether the frame two levels up (the one reading ``.value``) is pytreemod's or
    adapters' own code, which reads pytreemod's ``value`` field: no deprecation warning."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back  # the setter runs under Variable.__setattr__
    return frame.f_code.co_filename.startswith(_LIBRARY_DIRS)


def _same_array_type(value: Any, raw: jax.Array) -> bool:
    return (
        isinstance(value, jax.Array)
        and value.shape == raw.shape
        and value.dtype == raw.dtype
        and getattr(value, "sharding", None) == getattr(raw, "sharding", None)
    )


def _take_variable_metadata(
    value: VariableMetadata[Any],
    metadata: dict[str, Any],
    hijax: bool | None,
    ref: bool | None,
    eager_sharding: bool | None,
) -> tuple[bool | None, bool | None, bool | None, Any]:
    """Merge a ``VariableMetadata``'s entries and hooks into ``metadata``; the required
    flags it carries must agree with the constructor's arguments."""
    aux = dict(value.metadata)
    given = {"hijax": hijax, "ref": ref, "eager_sharding": eager_sharding}
    for key in ("hijax", "ref", "eager_sharding"):
        if key in aux:
            if given[key] is not None and given[key] != aux[key]:
                raise ValueError(
                    f"Cannot specify {key} both in VariableMetadata and as an argument to "
                    "Variable constructor."
                )
            given[key] = aux.pop(key) if key != "eager_sharding" else aux[key]
    metadata.update(aux)
    for hook in _HOOKS:
        hooks = getattr(value, hook)
        if hook not in metadata and hooks:
            metadata[hook] = hooks
    return given["hijax"], given["ref"], given["eager_sharding"], value.raw_value


VariableState = Variable
"""Deprecated alias (Flax's old name for the state of a Variable)."""


class _HijaxMeta(VariableMeta):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, Variable) and bool(instance._var_metadata.get("hijax"))


class HijaxVariable(Variable[A], metaclass=_HijaxMeta):
    """The type of Variables created with ``hijax=True`` (``isinstance`` checks the flag).

    Flax implements these as JAX "hijax" types that a traced function can mutate and
    return. Here a hijax Variable is an ordinary NNX Variable flagged ``hijax=True``:
    mutating it from another trace is allowed (no ``TraceContextError``), but inside
    ``jax.jit`` the mutation reaches the caller only through NNX's transforms.
    """


class Param(Variable[A], pm.Param[A], collection="params"):
    """A trainable parameter (collection ``params``; a ``pm.Param``).

    Every learnable array of NNX's layers is a ``Param``:
    ``nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Param)`` holds ``kernel`` and
    ``bias``.
    """


class BatchStat(Variable[A], pm.BatchStat[A], collection="batch_stats"):
    """Running statistics, such as BatchNorm's mean and variance (``batch_stats``)."""


class Cache(Variable[A], pm.Cache[A], collection="cache"):
    """Cached values, such as an autoregressive decoder's keys and values (``cache``)."""


class Intermediate(Variable[A], pm.Intermediate[A], collection="intermediates"):
    """Values sown during a call with ``Module.sow`` (``intermediates``)."""


class Perturbation(Intermediate[A], collection="perturbations"):
    """Perturbations added with ``Module.perturb``, whose gradients are the gradients of
    intermediate values (``perturbations``)."""


class RngState(Variable[A]):
    """State of an RNG stream (its key or counter); metadata ``tag`` names the stream."""


class RngKey(RngState[A]):
    """The key of an RNG stream."""


class RngCount(RngState[A]):
    """The call counter of an RNG stream."""


def _as_hooks(hooks: Any) -> tuple[Any, ...]:
    if not hooks:
        return ()
    return (hooks,) if callable(hooks) else tuple(hooks)


def with_metadata(
    initializer: F,
    on_set_value: SetValueHook | Sequence[SetValueHook] = (),
    on_get_value: GetValueHook | Sequence[GetValueHook] = (),
    on_create_value: CreateValueHook | Sequence[CreateValueHook] = (),
    on_add_axis: AddAxisHook | Sequence[AddAxisHook] = (),
    on_remove_axis: RemoveAxisHook | Sequence[RemoveAxisHook] = (),
    **metadata: Any,
) -> F:
    """``initializer`` whose result carries ``metadata`` (and hooks) into the Variable
    built from it: ``nnx.Param(with_metadata(init, out_sharding=(None, 'model'))(key,
    shape))`` is a ``Param`` with ``out_sharding`` metadata."""
    hooks = {
        "on_set_value": _as_hooks(on_set_value),
        "on_get_value": _as_hooks(on_get_value),
        "on_create_value": _as_hooks(on_create_value),
        "on_add_axis": _as_hooks(on_add_axis),
        "on_remove_axis": _as_hooks(on_remove_axis),
    }
    if any(hooks.values()):
        warnings.warn(
            "Variable hooks are deprecated in favor of users creating their own "
            "Variable types and overloading `get_value` and `set_value` instead.",
            stacklevel=2,
        )

    @functools.wraps(initializer)
    def wrapper(*args: Any) -> VariableMetadata[Any]:
        return VariableMetadata(initializer(*args), metadata=metadata, **hooks)

    return tp.cast(F, wrapper)


# --------------------------------------------------------------------------------------
# Linen collection name <-> NNX Variable type (one to one)
# --------------------------------------------------------------------------------------

VariableTypeCache: dict[str, type[Variable[Any]]] = {}
"""The registry of ``register_variable_name``: collection name -> Variable type."""


def variable_type_from_name(
    name: str, /, *, base: type[Variable[Any]] = Variable, allow_register: bool = False
) -> type[Variable[Any]]:
    """The Variable type registered for the Linen collection ``name``; with
    ``allow_register``, a new subclass of ``base`` named ``name`` is made and registered."""
    if name not in VariableTypeCache:
        if not allow_register:
            raise ValueError(
                f"Name {name} is not registered in the registry. "
                "To register a new name, use register_variable_name() "
                "or set allow_register=True."
            )
        VariableTypeCache[name] = type(name, (base,), {})
    return VariableTypeCache[name]


def variable_name_from_type(typ: type[Variable[Any]], /, *, allow_register: bool = False) -> str:
    """The Linen collection name registered for ``typ`` (the inverse of
    ``variable_type_from_name``); with ``allow_register``, ``typ``'s class name is
    registered."""
    for name, t in VariableTypeCache.items():
        if typ == t:
            return name
    if not allow_register:
        raise ValueError(
            f"Type {typ} is not registered in the registry. "
            "To register a new type, use register_variable_name() "
            "or set allow_register=True."
        )
    name = typ.__name__
    if name in VariableTypeCache:
        raise ValueError(
            f"Name {name} is already registered in the registry as "
            f"{VariableTypeCache[name]}. It cannot be linked with this type {typ}."
        )
    register_variable_name(name, typ)
    return name


def register_variable_name(name: str, typ: Any = MISSING, *, overwrite: bool = False) -> Any:
    """Link the Linen collection ``name`` with the Variable type ``typ`` (used as a class
    decorator when ``typ`` is omitted)."""
    if isinstance(typ, Missing):
        return functools.partial(register_variable_name, name, overwrite=overwrite)
    if not overwrite and name in VariableTypeCache:
        raise ValueError(
            f"Name {name} already mapped to type {VariableTypeCache[name]}. "
            "To overwrite, call register_variable_name() with `overwrite=True`."
        )
    VariableTypeCache[name] = typ
    return typ


register_variable_name("params", Param)
register_variable_name("batch_stats", BatchStat)
register_variable_name("cache", Cache)
register_variable_name("intermediates", Intermediate)
register_variable_name("perturbations", Perturbation)


def _unwrap(x: Any) -> Any:
    """The value of a Variable; anything else unchanged."""
    return x.get_value() if isinstance(x, Variable) else x
