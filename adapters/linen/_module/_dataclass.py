"""The class-level machinery of Linen modules: the dataclass transform that puts
``parent`` and ``name`` last, the hash wrapper, and the wrappers that turn a descriptor's
``AttributeError`` into ``DescriptorAttributeError``."""

import dataclasses
import functools
import inspect
import itertools
from collections.abc import Callable
from typing import Any, Optional

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
        dataclasses.dataclass(
            cls, unsafe_hash="__hash__" not in cls.__dict__, repr=False, kw_only=kw_only
        )
    finally:
        for base_fields, reserved, value in hidden:
            base_fields[reserved] = value
    cls.__hash__ = _wrap_hash(cls.__hash__)  # type: ignore[method-assign]
