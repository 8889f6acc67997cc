"""The class-level machinery of Linen modules: the dataclass transform that puts
``parent`` and ``name`` last, the hash wrapper, and the wrappers that turn a descriptor's
``AttributeError`` into ``DescriptorAttributeError``."""

import dataclasses
import functools
import inspect
import itertools
import re
import typing
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from ... import errors
from ..kw_only_dataclasses import inherit_kw_only
from ._context import _unspecified_parent


class DescriptorWrapper:
    """Base of the wrappers turning a descriptor's ``AttributeError`` into
    ``DescriptorAttributeError`` (otherwise Python would fall back to ``__getattr__``)."""

    wrapped: Any

    def __init__(self, wrapped: Any):
        self.wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)


def _wrapper_get(self: DescriptorWrapper, *args: Any, **kwargs: Any) -> Any:
    try:
        return self.wrapped.__get__(*args, **kwargs)
    except AttributeError as e:
        raise errors.DescriptorAttributeError() from e


def _wrapper_set(self: DescriptorWrapper, *args: Any, **kwargs: Any) -> Any:
    return self.wrapped.__set__(*args, **kwargs)


def _wrapper_delete(self: DescriptorWrapper, *args: Any, **kwargs: Any) -> Any:
    return self.wrapped.__delete__(*args, **kwargs)


def _wrapper_set_name(self: DescriptorWrapper, *args: Any, **kwargs: Any) -> Any:
    return self.wrapped.__set_name__(*args, **kwargs)


# One wrapper class per combination of descriptor methods, so a non-data descriptor
# stays a non-data descriptor. Module-level names keep them picklable by reference.
_DESCRIPTOR_WRAPPERS: dict[tuple[bool, bool, bool, bool], type] = {}
for _get, _set, _delete, _set_name in itertools.product((False, True), repeat=4):
    _ns: dict[str, Any] = {}
    if _get:
        _ns["__get__"] = _wrapper_get
    if _set:
        _ns["__set__"] = _wrapper_set
    if _delete:
        _ns["__delete__"] = _wrapper_delete
    if _set_name:
        _ns["__set_name__"] = _wrapper_set_name
    _cls_name = f"_DescriptorWrapper{int(_get)}{int(_set)}{int(_delete)}{int(_set_name)}"
    _ns["__module__"] = __name__
    _ns["__qualname__"] = _cls_name
    _wrapper_cls = type(_cls_name, (DescriptorWrapper,), _ns)
    globals()[_cls_name] = _wrapper_cls
    _DESCRIPTOR_WRAPPERS[(_get, _set, _delete, _set_name)] = _wrapper_cls


def wrap_descriptor_once(descriptor: Any) -> Any:
    """Wrap a descriptor (property...) so its ``AttributeError``s surface as
    ``DescriptorAttributeError``."""
    if isinstance(descriptor, DescriptorWrapper):
        return descriptor
    key = (
        hasattr(descriptor, "__get__"),
        hasattr(descriptor, "__set__"),
        hasattr(descriptor, "__delete__"),
        hasattr(descriptor, "__set_name__"),
    )
    wrapper = _DESCRIPTOR_WRAPPERS[key](descriptor)
    if hasattr(descriptor, "__isabstractmethod__"):
        object.__setattr__(wrapper, "__isabstractmethod__", descriptor.__isabstractmethod__)
    return wrapper


def _wrap_hash(hash_fn: Callable[[Any], int]) -> Callable[[Any], int]:
    @functools.wraps(hash_fn)
    def wrapped(self: Any) -> int:
        if self.scope is not None:
            raise TypeError("Can't call __hash__ on modules that hold variables.")
        try:
            return hash_fn(self)
        except TypeError as exc:
            raise TypeError(
                "Failed to hash Flax Module.  The module probably contains unhashable "
                f"attributes.  Module={self}"
            ) from exc

    return wrapped


# ----------------------------------------------------------------------------- dataclass


_NAME_ANNOTATIONS: tuple[Any, ...] = (
    "str",
    str,
    Optional[str],  # noqa: UP045
    "Optional[str]",
    "str | None",
)


def _dataclass_transform(cls: type, kw_only: bool, parent_type: Any) -> None:
    """Make ``cls`` a dataclass whose last two fields are keyword-only ``parent``, ``name``."""
    own_annotations = inspect.get_annotations(cls)
    if own_annotations.get("parent", parent_type) != parent_type:
        raise errors.ReservedModuleAttributeError(dict(own_annotations))
    if own_annotations.get("name", str) not in _NAME_ANNOTATIONS:
        raise errors.ReservedModuleAttributeError(dict(own_annotations))
    for field_name in own_annotations:
        meta = cls.__dict__.get(field_name)
        if isinstance(meta, dataclasses.Field) and not meta.init:
            meta.compare = False
            meta.hash = False
            meta.repr = False
    # dataclasses keep an inherited field at its inherited position: hide the bases'
    # parent/name while the class is built so that they come last here too.
    hidden: list[tuple[dict[str, Any], str, Any]] = []
    for base in cls.__mro__[1:]:
        base_fields = base.__dict__.get("__dataclass_fields__")
        if base_fields:
            for reserved in ("parent", "name"):
                if reserved in base_fields:
                    hidden.append((base_fields, reserved, base_fields.pop(reserved)))
    try:
        annotations = dict(own_annotations)
        annotations.pop("parent", None)
        annotations.pop("name", None)
        annotations["parent"] = parent_type
        annotations["name"] = Optional[str]  # noqa: UP045
        cls.__annotations__ = annotations
        cls.parent = dataclasses.field(  # type: ignore[attr-defined]
            repr=False, default=_unspecified_parent, kw_only=True
        )
        cls.name = dataclasses.field(default=None, kw_only=True)  # type: ignore[attr-defined]
        inherit_kw_only(cls)
        own_init = "__init__" in cls.__dict__
        dataclasses.dataclass(
            cls, unsafe_hash="__hash__" not in cls.__dict__, repr=False, kw_only=kw_only
        )
        if not own_init:  # the generated one
            cls.__init__ = _python_numbers(cls, cls.__init__)  # type: ignore[misc]
    finally:
        for base_fields, reserved, value in hidden:
            base_fields[reserved] = value
    cls.__hash__ = _wrap_hash(cls.__hash__)  # type: ignore[method-assign]


# ----------------------------------------------------------------------------- numbers
# Python's numeric tower: a NumPy scalar passed for a field annotated with a Python number
# (``momentum: float``, ``padding: PaddingLike``...) is stored as the Python number it
# holds. It then means exactly what that number means: weakly typed in JAX arithmetic
# (``np.int64(1)`` as an epsilon does not turn a float32 computation into an int one),
# accepted wherever the layer tests ``isinstance(x, int)``, and hashed the same way.
# pytreemod's own Modules and ops do the same.

_NUMBER_WORD = re.compile(r"\b(int|float|complex)\b")


def _is_numeric(hint: Any) -> bool:
    if isinstance(hint, str):  # an annotation that could not be resolved
        return _NUMBER_WORD.search(hint) is not None
    if hint is int or hint is float or hint is complex:
        return True
    return any(_is_numeric(a) for a in typing.get_args(hint))


def _numeric_fields(cls: type) -> frozenset[str]:
    try:
        hints: dict[str, Any] = typing.get_type_hints(cls)
    except Exception:  # an unresolvable forward reference: read the raw annotations
        hints = {}
        for base in reversed(cls.__mro__):
            hints.update(inspect.get_annotations(base))
    return frozenset(
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.init and _is_numeric(hints.get(f.name))
    )


def _as_python(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value if isinstance(value, np.bool_) else value.item()
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        if any(isinstance(v, np.generic) for v in value):
            return type(value)(_as_python(v) for v in value)
    return value


def _python_numbers(cls: type, init: Callable[..., None]) -> Callable[..., None]:
    """Wrap the dataclass ``__init__`` of ``cls`` so NumPy scalars given for its numeric
    fields arrive as Python numbers. Which fields are numeric is read from the annotations
    on the first call (when forward references have been defined)."""
    slots: list[tuple[frozenset[int], frozenset[str]]] = []

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not slots:
            names = _numeric_fields(cls)
            params = list(inspect.signature(init).parameters.values())[1:]  # less self
            positional = (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            )
            positions = frozenset(
                i for i, p in enumerate(params) if p.name in names and p.kind in positional
            )
            slots.append((positions, names))
        positions, names = slots[0]
        if positions and args:
            args = tuple(_as_python(a) if i in positions else a for i, a in enumerate(args))
        if names and kwargs:
            for key in names.intersection(kwargs):
                kwargs[key] = _as_python(kwargs[key])
        init(self, *args, **kwargs)

    return __init__
