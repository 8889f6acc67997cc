"""``_ModuleMeta``: makes every Module subclass a dataclass registered with JAX's C++
PyTree path, and builds instances (``__init__``, or directly when JAX unflattens)."""

import dataclasses
import inspect
from abc import ABCMeta
from typing import Any, TypeVar, cast, dataclass_transform

import jax.tree_util as jtu

from ._descriptors import wrap_methods
from ._fields import (
    MARK,
    UNFLATTEN,
    FieldTable,
    field,
    hide_sentinel,
    record_fields,
    sentinel_field,
)
from ._init import finish_init, initialising
from ._signature import spell_out_options, takes_unpacked_options
from ._typecheck import checks_numbers, typecheck_methods

_T = TypeVar("_T")


# No frozen_default=True: type checkers would then reject the assignments in a custom
# __init__ (`self.weight = ...`), the documented way to write a module. Freezing is enforced
# at runtime by Module.__setattr__.
@dataclass_transform(eq_default=False, field_specifiers=(dataclasses.field, field))
class _ModuleMeta(ABCMeta):
    """Makes every Module subclass a dataclass registered with JAX's C++ PyTree path."""

    def __new__(
        mcs,
        name: str,
        bases: tuple[type, ...],
        namespace: dict[str, Any],
        *,
        typecheck: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        is_base = not any(isinstance(b, _ModuleMeta) for b in bases)
        if typecheck is None:
            typecheck = any(getattr(b, "_pytreemod_typecheck", False) for b in bases)
        if typecheck:
            typecheck_methods(namespace)
        # Checked methods annotated with `Self` (the class's own or a layer's @checked
        # ones) are checked against this class, which exists only after type.__new__.
        awaiting_owner = [v for v in namespace.values() if hasattr(v, "_pytreemod_owner")]
        if is_base:
            namespace.setdefault("__annotations__", {})[MARK] = Any
            namespace[MARK] = sentinel_field()
        else:
            wrap_methods(namespace)
        cls: Any = super().__new__(mcs, name, bases, namespace, **kwargs)
        for method in awaiting_owner:
            method._pytreemod_owner[0] = cls
        user_init = "__init__" in namespace or any(
            getattr(b, "_pytreemod_user_init", False) for b in bases
        )
        cls._pytreemod_user_init = user_init
        cls._pytreemod_typecheck = bool(typecheck)
        # dataclass never overwrites an __init__ defined in the class body itself.
        cls = dataclasses.dataclass(eq=False, repr=False, init=not user_init)(cls)
        cls.__dataclass_fields__ = FieldTable.of(cls.__dict__["__dataclass_fields__"])
        if is_base:  # the sentinel is a field (in the table above), not an annotation
            del cls.__annotations__[MARK]
        if not user_init:  # help() shows __init__'s signature: without the sentinel
            hide_sentinel(cls.__dict__["__init__"])
        if typecheck and "__init__" not in namespace and "__init__" in cls.__dict__:
            cls.__init__ = checks_numbers(cls.__init__)  # the generated one, as a custom one
        if "__init__" in namespace and takes_unpacked_options(cls.__dict__["__init__"]):
            spell_out_options(cls, cls.__dict__["__init__"])
        dynamic, static = record_fields(cls, name)
        if not is_base:
            jtu.register_dataclass(cls, data_fields=dynamic, meta_fields=[*static, MARK])
        return cls

    @property
    def __signature__(cls) -> inspect.Signature:
        # A property of the metaclass, so it describes the class (what calling it takes)
        # and is not inherited by instances, whose signature is their __call__'s.
        signature = inspect.signature(cls.__init__)
        parameters = list(signature.parameters.values())[1:]  # drop self
        return signature.replace(parameters=[p for p in parameters if p.name != MARK])

    # Annotated with the class's own instance type, not `Any`: type checkers then keep
    # checking `Model(...)` against __init__ and infer `Model` (with `-> Any` every call
    # would be Any).
    def __call__(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        if kwargs.get(MARK) is UNFLATTEN:
            # JAX (or replace/tree_at) rebuilding a tree: no __init__, no checks.
            del kwargs[MARK]
            new: Any = object.__new__(cls)
            new.__dict__.update(kwargs)
            return new
        self: Any = cast(Any, cls).__new__(cls)  # object.__new__: checks abstract methods
        key = id(self)
        initialising.add(key)
        try:
            cls.__init__(self, *args, **kwargs)
        finally:
            initialising.discard(key)
        finish_init(cls, self)
        return self
