"""The ``Variable`` class."""

import functools
import os
import sys
import typing as tp
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import jax
import jax.ref
import jax.tree_util as jtu

import pytreemod as pm
from adapters import errors
from adapters.core import spmd as core_spmd
from adapters.typing import MISSING, Missing

from .. import _structure, reprlib, tracers
from ._defaults import _current_defaults, using_eager_sharding
from ._metadata import (
    _HOOKS,
    A,
    AxisIndex,
    AxisName,
    VariableMetadata,
    _copy_tree,
    _remap_sharding_metadata,
    _run_hooks,
    _same_array_type,
    _shown_metadata,
    _size_comment,
    _take_variable_metadata,
    is_array_ref,
)

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


# Flax's warnings for the deprecated ``.value`` (read by the hijax Variable too).
VALUE_GET_DEPRECATED = (
    "'.value' access is now deprecated. For Variable[Array] instances use:\n\n"
    "  variable[...]\n\nFor other Variable types use:\n\n  variable.get_value()\n"
)
VALUE_SET_DEPRECATED = (
    "'.value' setter is now deprecated. For Variable[Array] instances use:\n\n"
    "  variable[...] = value\n\nFor other Variable types use:\n\n"
    "  variable.set_value(value)\n"
)


class _HijaxHooks:
    """What ``_hijax`` (which imports this module) lends ``Variable``: making the hijax
    Variable of a new ``hijax=True`` Variable, and the Variable type a hijax Variable (or
    its Tracer) stands for. Until it is installed, no value is a hijax Variable."""

    def __init__(self) -> None:
        self.to_hijax: Callable[[Any], Any] | None = None
        self.var_type_of: Callable[[Any], type | None] = lambda x: None

    def install(
        self, *, to_hijax: Callable[[Any], Any], var_type_of: Callable[[Any], type | None]
    ) -> None:
        self.to_hijax = to_hijax
        self.var_type_of = var_type_of

    def lift(self, variable: Any) -> Any:
        """``variable`` as a hijax Variable if its metadata says ``hijax=True``."""
        if self.to_hijax is not None and variable._var_metadata.get("hijax"):
            return self.to_hijax(variable)
        return variable


HIJAX_HOOKS = _HijaxHooks()


class VariableMeta(type):
    """Metaclass of Variables: every subclass gets ``__slots__ = ()`` unless it says
    otherwise (a Variable keeps its state in three slots, never in a ``__dict__``).

    Calling a Variable type with ``hijax=True`` (or under ``var_defaults(hijax=True)``)
    returns a ``HijaxVariable``, and ``isinstance(x, nnx.Param)`` holds for a hijax
    ``Param`` and, under a JAX trace, for its Tracer."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any
    ) -> "VariableMeta":
        attrs.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, attrs, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        var_type = HIJAX_HOOKS.var_type_of(instance)
        return var_type is not None and issubclass(var_type, cls)

    if not tp.TYPE_CHECKING:

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            return HIJAX_HOOKS.lift(super().__call__(*args, **kwargs))


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
        _structure.written()  # after the write (see _structure: values kept by plans)

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
        _structure.bump()
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
        _structure.bump()
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
        _structure.bump()
        self._var_metadata.clear()
        self._var_metadata.update(other.get_metadata())

    def update_from_state(self, variable_state: "Variable[A]") -> None:
        """Take the raw value and metadata of ``variable_state``, keeping ``hijax``/``ref``."""
        self._raw_value = variable_state._raw_value
        if self._var_metadata != variable_state._var_metadata:
            _structure.bump()
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
        _structure.written()

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
                VALUE_GET_DEPRECATED,
                DeprecationWarning,
                stacklevel=2,
            )
        return self.get_value()

    @value.setter
    def value(self, value: A) -> None:  # pyright: ignore[reportIncompatibleVariableOverride]
        if not _internal_caller():
            warnings.warn(
                VALUE_SET_DEPRECATED,
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
        checks); a ``HijaxVariable`` if ``attributes['hijax']``."""
        return HIJAX_HOOKS.lift(cls._new(value, dict(attributes)))

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


# The files whose frames sit between ``.value`` and its reader: this one (the setter
# runs under ``Variable.__setattr__``) and ``_hijax`` (``HijaxVariable.__setattr__``),
# which adds itself.
PROPERTY_FILES = {__file__}


def _internal_caller() -> bool:
    """Whether the frame two levels up (the one reading ``.value``) is pytreemod's or
    adapters' own code, which reads pytreemod's ``value`` field: no deprecation warning."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename in PROPERTY_FILES:
        frame = frame.f_back
    return frame.f_code.co_filename.startswith(_LIBRARY_DIRS)
