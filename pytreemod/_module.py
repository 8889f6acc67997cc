"""``Module``: a frozen dataclass that is a PyTree.

Invariants (see ``pytreemod/README.md`` for the longer story):

- Every field is a PyTree child unless declared ``field(static=True)``; static values are
  kept in the treedef and must be hashable.
- Instances are immutable once ``__init__`` returns. Inside ``__init__`` fields may be
  assigned (``self.weight = ...``); afterwards assignment raises ``FrozenModuleError``.
- Flattening runs in JAX's C++ dataclass path (``jax.tree_util.register_dataclass``); no
  Python runs per node when JAX flattens a model. Unflattening (which JAX does by calling
  the class with every field as a keyword) is recognised by a sentinel keyword and builds
  the instance directly, without running ``__init__``, converters or checks: a rebuilt
  tree may hold tracers, ``None`` or any placeholder JAX puts there.
- Methods accessed on an instance are ``BoundMethod`` PyTrees, so ``jit(model.encode)``
  traces the model's arrays instead of baking them in as constants; so are dunder methods
  such as ``model.__call__``, except the protocol ones Python and the library call
  implicitly (``_PLAIN_DUNDERS``).
- ``inspect.signature(ModuleClass)`` is the signature of its ``__init__`` (without
  ``self``), whether the dataclass wrote it or the class did.
"""

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import types
import typing
import warnings
from abc import ABCMeta
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast, dataclass_transform

import jax
import jax.tree_util as jtu
import numpy as np

from ._errors import (
    FrozenModuleError,
    InvalidFieldError,
    StaticArrayWarning,
    UndeclaredFieldError,
    UnhashableModuleError,
    UninitializedFieldError,
)
from ._repr import array_summary, format_group, tree_pformat
from ._shapecheck import checked, python_numbers
from ._tree import format_path, tree_equal
from ._treescope import treescope_repr
from ._variables import Variable

_T = TypeVar("_T")
_M = TypeVar("_M", bound="Module")


class _UnflattenSentinel:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<pytreemod.unflatten>"

    def __reduce__(self) -> str:
        return "_UNFLATTEN"


_UNFLATTEN = _UnflattenSentinel()
_MARK = "_pytreemod_unflatten"
# ids of instances whose __init__ is running; only they accept attribute assignment.
_initialising: set[int] = set()


def field(
    *,
    static: bool = False,
    converter: Callable[[Any], Any] | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    repr: bool = True,
    kw_only: bool | Any = dataclasses.MISSING,
    metadata: dict[str, Any] | None = None,
) -> Any:
    """Declare a Module field with options, as ``dataclasses.field`` does.

    **Arguments:**

    - ``static``: keep the value in the tree structure instead of as a child. Use it for
      hashable configuration (sizes, flags, activation functions); JAX transforms then see
      it as a compile-time constant.
    - ``converter``: applied to the value after ``__init__`` (e.g. ``jnp.asarray``); not
      applied when JAX rebuilds a tree.
    - ``default``, ``default_factory``, ``repr``, ``kw_only``: as in ``dataclasses``.
    - ``metadata``: extra metadata stored on the field.

    >>> import pytreemod as pm
    >>> class Scale(pm.Module):
    ...     factor: float
    ...     name: str = pm.field(static=True, default="scale")
    >>> Scale(2.0)
    Scale(factor=2.0, name='scale')
    """
    md = dict(metadata or {})
    md["static"] = static
    if converter is not None:
        md["converter"] = converter
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        repr=repr,
        kw_only=kw_only,
        metadata=md,
    )


_new_partial = functools.partial.__new__


class BoundMethod(functools.partial[_T]):
    """A method bound to a Module, itself a PyTree whose only child is the module.

    Passed as an argument to a transform (``jax.jit(lambda f, x: f(x))(model.encode, x)``,
    or a pytreemod transform of ``model.encode``), the model's arrays are therefore inputs,
    not constants captured in a closure. (``jax.jit(model.encode)`` works too, but plain
    JAX treats the function it wraps as static, so there the arrays are constants.)

    It is a ``functools.partial`` of the function with the module as first argument, so
    that calling it (``model(x)`` goes through ``model.__call__``) runs in C.
    """

    __slots__ = ()

    def __new__(cls, __func__: Callable[..., _T], __self__: Any) -> "BoundMethod[_T]":
        return _new_partial(cls, __func__, __self__)

    @property
    def __func__(self) -> Callable[..., _T]:
        """The function (as defined in the class body)."""
        return self.func

    @property
    def __self__(self) -> Any:
        """The module the method is bound to."""
        return self.args[0]

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenModuleError(f"Cannot set {name!r} on a bound method; it is immutable.")

    def __reduce__(self) -> tuple[Any, ...]:
        # copy/deepcopy/pickle: rebuild through __new__, not the frozen __setattr__.
        return (BoundMethod, (self.func, self.args[0]))

    def __getattr__(self, name: str) -> Any:
        # __name__, __qualname__ ... of the underlying function.
        if name in ("__func__", "__self__", "func", "args", "keywords"):
            raise AttributeError(name)
        return getattr(self.func, name)

    @property
    def __wrapped__(self) -> Callable[..., _T]:
        return functools.partial(self.func, self.args[0])

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is BoundMethod and self.func is other.func and self.args[0] == other.args[0]
        )

    def __hash__(self) -> int:
        # Not hash(self.__self__): a module holding arrays is unhashable, and jax.jit hashes
        # the function it wraps. Equal bound methods still hash equal.
        return hash((self.func, type(self.args[0])))

    def __repr__(self) -> str:
        return f"<bound method {self.func.__qualname__} of {type(self.args[0]).__name__}>"

    def _pytreemod_pformat(self, indent: int, width: int, used: int) -> str:
        return repr(self)


jtu.register_dataclass(BoundMethod, data_fields=["__self__"], meta_fields=["__func__"])


class _MethodDescriptor:
    """Turns attribute access ``module.method`` into a ``BoundMethod`` PyTree."""

    def __init__(self, func: types.FunctionType):
        self.__func__ = func
        functools.update_wrapper(cast(Any, self), func)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self.__func__
        return _new_partial(BoundMethod, self.__func__, instance)


CallHook = Callable[..., Any]
"""``hook(func, module, *args, **kwargs)``: runs the call ``module(*args, **kwargs)``,
whose method is ``func`` (as defined in the class body), in place of ``func(module,
*args, **kwargs)``, and returns what the call returns."""

# The hook every Module ``__call__`` goes through while one is set (``pm.tabulate``
# records calls with it); unset, a call pays one ``ContextVar.get`` and nothing else.
_call_hook: contextvars.ContextVar[CallHook | None] = contextvars.ContextVar(
    "pytreemod_call_hook", default=None
)


@contextlib.contextmanager
def hooked_calls(hook: CallHook) -> Iterator[None]:
    """Route every Module ``__call__`` made in this context through ``hook``.

    Nothing is patched: the ``__call__`` descriptor of every Module class reads the hook
    (a context variable, so threads and other contexts are unaffected) when the call is
    looked up, ``model(x)`` and ``model.__call__`` alike.
    """
    token = _call_hook.set(hook)
    try:
        yield
    finally:
        _call_hook.reset(token)


class _CallDescriptor(_MethodDescriptor):
    """``__call__``: a ``BoundMethod`` as any method, routed through the call hook when
    one is set (``hooked_calls``)."""

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self.__func__
        hook = _call_hook.get()
        if hook is None:
            return _new_partial(BoundMethod, self.__func__, instance)
        hooked = functools.update_wrapper(functools.partial(hook, self.__func__), self.__func__)
        return _new_partial(BoundMethod, hooked, instance)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


# Dunders that stay plain functions: Python (or a library: copy, pickle, dataclasses, JAX,
# NumPy, treescope, rich) calls them implicitly, and some must be functions in the class
# body (``__new__``, ``__init_subclass__``, ``__class_getitem__``; ``__check_init__`` is
# called from the class dict). Every other method, ``__call__`` and operators included,
# is a ``BoundMethod`` PyTree when read from an instance.
_PLAIN_DUNDERS = frozenset(
    {
        *("__new__", "__init__", "__post_init__", "__check_init__", "__del__"),
        *("__init_subclass__", "__class_getitem__", "__set_name__", "__subclasshook__"),
        *("__instancecheck__", "__subclasscheck__", "__mro_entries__", "__prepare__"),
        *("__getattr__", "__getattribute__", "__setattr__", "__delattr__", "__dir__"),
        *("__get__", "__set__", "__delete__"),
        *("__repr__", "__str__", "__bytes__", "__format__", "__sizeof__"),
        *("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__"),
        *("__len__", "__length_hint__", "__iter__", "__next__", "__reversed__"),
        *("__contains__", "__enter__", "__exit__", "__aenter__", "__aexit__"),
        *("__await__", "__aiter__", "__anext__", "__buffer__", "__release_buffer__"),
        *("__index__", "__int__", "__float__", "__complex__", "__fspath__"),
        *("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__"),
        *("__getnewargs__", "__getnewargs_ex__", "__copy__", "__deepcopy__", "__replace__"),
        *("__array__", "__array_ufunc__", "__array_function__", "__array_priority__"),
        *("__jax_array__", "__dlpack__", "__dlpack_device__", "__tree_flatten__"),
        *("__treescope_repr__", "__rich_repr__", "__rich__", "__rich_console__"),
    }
)


def _wraps_as_bound_method(name: str) -> bool:
    return not _is_dunder(name) or name not in _PLAIN_DUNDERS


_UNCHECKED = frozenset({"__init__", "__check_init__", "__post_init__", "__repr__"})


def _typecheck_methods(namespace: dict[str, Any]) -> None:
    """Wrap the class's own methods (``__call__`` and public ones) with jaxtyping+beartype.

    The check runs whenever the method is called eagerly, and once per trace under
    ``jit``: a compiled step pays nothing for it. A failed check is a ``ShapeError`` naming
    the class, the method, the argument and the dimension (``_shapecheck.checked``).
    ``__init__`` is not checked (modules rebuilt by JAX never run it anyway), nor is a
    method already wrapped by ``checked`` (the layers' own).
    """
    init = namespace.get("__init__")
    if isinstance(init, types.FunctionType):  # NumPy scalars arrive as Python numbers
        namespace["__init__"] = python_numbers(init)
    for key, value in list(namespace.items()):
        if not isinstance(value, types.FunctionType) or key in _UNCHECKED:
            continue
        if _is_dunder(key) and key != "__call__":
            continue
        if getattr(value, "__no_type_check__", False):
            continue
        namespace[key] = checked(value, method=True)


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
            _typecheck_methods(namespace)
        # Checked methods annotated with `Self` (the class's own or a layer's @checked
        # ones) are checked against this class, which exists only after type.__new__.
        awaiting_owner = [v for v in namespace.values() if hasattr(v, "_pytreemod_owner")]
        if is_base:
            # The unflatten sentinel is a real (kw-only) dataclass field so that
            # register_dataclass accepts it as a meta field; its value lives on the class.
            namespace.setdefault("__annotations__", {})[_MARK] = Any
            namespace[_MARK] = dataclasses.field(
                default=_UNFLATTEN, kw_only=True, repr=False, compare=False
            )
        else:
            for key, value in list(namespace.items()):
                if isinstance(value, types.FunctionType) and _wraps_as_bound_method(key):
                    descriptor = _CallDescriptor if key == "__call__" else _MethodDescriptor
                    namespace[key] = descriptor(value)
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
        table = cls.__dict__["__dataclass_fields__"]
        own = {k: f for k, f in table.items() if not k.startswith("_pytreemod_")}
        cls.__dataclass_fields__ = _FieldTable({**own, _MARK: table[_MARK]})
        if is_base:  # the sentinel is a field (in the table above), not an annotation
            del cls.__annotations__[_MARK]
        if not user_init:  # help() shows __init__'s signature: without the sentinel
            _hide_sentinel(cls.__dict__["__init__"])
        if typecheck and "__init__" not in namespace and "__init__" in cls.__dict__:
            cls.__init__ = python_numbers(cls.__init__)  # the generated one, as a custom one
        if "__init__" in namespace and _takes_unpacked_options(cls.__dict__["__init__"]):
            _spell_out_options(cls, cls.__dict__["__init__"])
        fields = [f for f in dataclasses.fields(cls) if f.name != _MARK]
        for f in fields:
            if not f.init:
                raise InvalidFieldError(
                    f"Field {name}.{f.name} is declared with init=False; every Module field "
                    "must be settable because JAX rebuilds modules from their fields. Drop "
                    "init=False and assign the field in a custom __init__ instead."
                )
        static = tuple(f.name for f in fields if f.metadata.get("static", False))
        dynamic = [f.name for f in fields if not f.metadata.get("static", False)]
        cls._pytreemod_field_objs = tuple(fields)
        cls._pytreemod_fields = tuple(f.name for f in fields)
        cls._pytreemod_fieldset = frozenset(cls._pytreemod_fields) | {_MARK}
        cls._pytreemod_static = static
        cls._pytreemod_data_fields = tuple(dynamic)
        cls._pytreemod_converters = tuple(
            (f.name, f.metadata["converter"]) for f in fields if "converter" in f.metadata
        )
        cls._pytreemod_check_inits = tuple(
            k.__dict__["__check_init__"]
            for k in reversed(cls.__mro__)
            if "__check_init__" in k.__dict__
        )
        if not is_base:
            jtu.register_dataclass(cls, data_fields=dynamic, meta_fields=[*static, _MARK])
        return cls

    @property
    def __signature__(cls) -> inspect.Signature:
        # A property of the metaclass, so it describes the class (what calling it takes)
        # and is not inherited by instances, whose signature is their __call__'s.
        signature = inspect.signature(cls.__init__)
        parameters = list(signature.parameters.values())[1:]  # drop self
        return signature.replace(parameters=[p for p in parameters if p.name != _MARK])

    # Annotated with the class's own instance type, not `Any`: type checkers then keep
    # checking `Model(...)` against __init__ and infer `Model` (with `-> Any` every call
    # would be Any).
    def __call__(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        if kwargs.get(_MARK) is _UNFLATTEN:
            # JAX (or replace/tree_at) rebuilding a tree: no __init__, no checks.
            del kwargs[_MARK]
            new: Any = object.__new__(cls)
            new.__dict__.update(kwargs)
            return new
        self: Any = cast(Any, cls).__new__(cls)  # object.__new__: checks abstract methods
        key = id(self)
        _initialising.add(key)
        try:
            cls.__init__(self, *args, **kwargs)
        finally:
            _initialising.discard(key)
        _finish_init(cls, self)
        return self


class _FieldTable(dict[str, Any]):
    """A Module class's ``__dataclass_fields__``: its fields, then the unflatten sentinel
    (a real field, which JAX's dataclass registration needs). The metaclass's bookkeeping
    ClassVars are left out, and the repr (the line ``help()`` shows) leaves out the
    sentinel, so ``help(pm.nn.Conv2d)`` shows the layer's fields and nothing internal."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr({k: v for k, v in self.items() if k != _MARK})


def _hide_sentinel(init: Any) -> None:
    signature = inspect.signature(init)
    shown = [p for p in signature.parameters.values() if p.name != _MARK]
    init.__signature__ = signature.replace(parameters=shown)


def _takes_unpacked_options(init: Any) -> bool:
    """Whether ``init`` declares ``**kwargs: Unpack[SomeTypedDict]`` (read cheaply, from
    its raw annotations)."""
    for hint in getattr(init, "__annotations__", {}).values():
        if typing.get_origin(hint) is typing.Unpack:
            return True
        if isinstance(hint, str) and hint.replace(" ", "").startswith(
            ("Unpack[", "typing.Unpack[")
        ):
            return True
    return False


def _spell_out_options(cls: Any, init: Any) -> None:
    """Give ``init`` (and so the class) a signature listing the keyword arguments of its
    ``**kwargs: Unpack[Options]``, as ``inspect.signature`` and ``help()`` show them:
    ``Conv2d(in_features, out_features, kernel_size, *, strides=1, padding='SAME', ...,
    key)``. Their annotations are the TypedDict's; their defaults are those of the base
    classes' ``__init__`` that the options are passed on to (a required key has none).
    Left as it is when an optional key has no default there."""
    signature = inspect.signature(init)
    params = list(signature.parameters.values())
    if not params or params[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return
    try:
        (options,) = typing.get_args(typing.get_type_hints(init)[params[-1].name])
        hints = typing.get_type_hints(options)
    except Exception:  # an unresolvable annotation: keep **kwargs
        return
    if not typing.is_typeddict(options):
        return
    defaults: dict[str, Any] = {}
    for base in cls.__mro__[1:]:
        base_init = base.__dict__.get("__init__")
        if base_init is None or base is object:
            continue
        for p in inspect.signature(base_init).parameters.values():
            if p.default is not inspect.Parameter.empty:
                defaults.setdefault(p.name, p.default)
    keyword = []
    for name, hint in hints.items():
        if name in options.__required_keys__:
            default = inspect.Parameter.empty
        elif name in defaults:
            default = defaults[name]
        else:
            return
        keyword.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
            )
        )
    init.__signature__ = signature.replace(parameters=[*params[:-1], *keyword])


def _finish_init(cls: Any, self: Any) -> None:
    state = self.__dict__
    state.pop(_MARK, None)
    missing = []
    for f in cls._pytreemod_field_objs:
        if f.name not in state:
            if f.default is not dataclasses.MISSING:
                state[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                state[f.name] = f.default_factory()
            else:
                missing.append(f.name)
    if missing:
        names = ", ".join(repr(n) for n in missing)
        raise UninitializedFieldError(
            f"{cls.__name__}.__init__ returned without setting field(s) {names}. Assign "
            f"them in __init__ (self.{missing[0]} = ...) or give them a default in the "
            "class body."
        )
    for name, converter in cls._pytreemod_converters:
        state[name] = converter(state[name])
    for name in cls._pytreemod_static:
        value = state[name]
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
    for check in cls._pytreemod_check_inits:
        check(self)


# Values that are neither arrays nor Variables nor NumPy scalars, nor hold any.
_PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None)})


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
                stacklevel=4,  # the line that constructs the module
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


class Module(metaclass=_ModuleMeta):
    """Base class of models: a frozen dataclass that is a JAX PyTree.

    Declare fields in the class body. Arrays (usually wrapped in ``Param`` or another
    ``Variable`` to name their collection) and submodules are children; configuration
    declared with ``field(static=True)`` lives in the tree structure. Either let the
    dataclass write ``__init__`` or write your own that assigns every field.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> class Linear(pm.Module):
    ...     weight: pm.Param
    ...     bias: pm.Param
    ...     def __init__(self, n_in: int, n_out: int, *, key: jax.Array):
    ...         self.weight = pm.Param(jax.random.normal(key, (n_in, n_out)))
    ...         self.bias = pm.Param(jnp.zeros(n_out))
    ...     def __call__(self, x):
    ...         return x @ self.weight.value + self.bias.value
    >>> Linear(2, 3, key=jax.random.key(0))
    Linear(weight=Param(f32[2, 3]), bias=Param(f32[3]))

    After construction the instance is immutable; use ``replace`` or ``tree_at`` to get
    an updated copy.
    """

    if TYPE_CHECKING:  # set by the metaclass; declared for type checkers, not as fields
        _pytreemod_field_objs: ClassVar[tuple[dataclasses.Field[Any], ...]]
        _pytreemod_fields: ClassVar[tuple[str, ...]]
        _pytreemod_fieldset: ClassVar[frozenset[str]]
        _pytreemod_static: ClassVar[tuple[str, ...]]
        _pytreemod_data_fields: ClassVar[tuple[str, ...]]
        _pytreemod_converters: ClassVar[tuple[tuple[str, Callable[[Any], Any]], ...]]
        _pytreemod_check_inits: ClassVar[tuple[Callable[[Any], None], ...]]
        _pytreemod_user_init: ClassVar[bool]
        _pytreemod_typecheck: ClassVar[bool]

    def __setattr__(self, name: str, value: Any) -> None:
        if id(self) in _initialising:
            if name not in type(self)._pytreemod_fieldset:
                raise UndeclaredFieldError(
                    f"{type(self).__name__}.__init__ sets {name!r}, which is not a declared "
                    f"field. Declare it in the class body (`{name}: <type>`) so it becomes "
                    "part of the PyTree."
                )
            object.__setattr__(self, name, value)
            return
        raise FrozenModuleError(
            f"Cannot assign {type(self).__name__}.{name}: modules are immutable after "
            f"__init__. Build an updated copy instead: `model.replace({name}=...)` for this "
            f"field, or `pytreemod.tree_at(lambda m: m.path.to.{name}, model, new_value)` "
            "from the root of the model."
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenModuleError(
            f"Cannot delete {type(self).__name__}.{name}: modules are immutable. Use "
            "`model.replace(...)` to build a copy with a different value."
        )

    def replace(self: _M, **changes: Any) -> _M:
        """Return a copy with the given fields replaced (no ``__init__``, no converters).

        >>> import pytreemod as pm
        >>> class Box(pm.Module):
        ...     x: int
        >>> Box(1).replace(x=2)
        Box(x=2)
        """
        return replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tree_equal(self, other)

    def __hash__(self) -> int:
        try:
            return hash((type(self), *jtu.tree_leaves(self)))
        except TypeError:
            raise UnhashableModuleError(
                f"{type(self).__name__} is not hashable because it holds arrays. This usually "
                "means a model was used where JAX needs a static value, as in "
                "`jax.jit(model)` or `static_argnums`: pass the model as a traced argument "
                "instead, e.g. `pm.jit(model)(x)` or `jax.jit(lambda m, x: m(x))(model, x)`."
            ) from None

    def __repr__(self) -> str:
        return tree_pformat(self)

    def _pytreemod_pformat(self, indent: int, width: int, used: int) -> str:
        items = [
            (f.name, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.repr and f.name in self._pytreemod_fieldset and f.name in self.__dict__
        ]
        return format_group(f"{type(self).__name__}(", ")", items, indent, width, used)

    def __treescope_repr__(self, path: str | None, subtree_renderer: Callable[..., Any]) -> Any:
        """Render as a foldable tree in notebooks (needs the optional ``treescope``)."""
        return treescope_repr(self, path, subtree_renderer)


def replace(module: _M, /, **changes: Any) -> _M:
    """Return a copy of ``module`` with the named fields replaced.

    The copy is built directly (no ``__init__``, converters or ``__check_init__``), exactly
    as JAX rebuilds a tree. An unknown field name is an ``UndeclaredFieldError``.
    """
    cls = type(module)
    if not isinstance(module, Module):
        raise TypeError(
            f"replace: expected a Module (an instance of a pm.Module subclass), got "
            f"{cls.__name__}; for other trees use pm.tree_at(lambda t: ..., tree, value)."
        )
    unknown = [n for n in changes if n not in cls._pytreemod_fields]
    if unknown:
        fields = ", ".join(cls._pytreemod_fields) or "(none)"
        raise UndeclaredFieldError(
            f"{cls.__name__} has no field {unknown[0]!r}; its fields are: {fields}."
        )
    new: Any = object.__new__(cls)
    new.__dict__.update(module.__dict__)
    new.__dict__.update(changes)
    return new


def fields(module: "Module | type[Module]") -> tuple[dataclasses.Field[Any], ...]:
    """The dataclass fields of a Module class or instance (without internal ones)."""
    return tuple(f for f in dataclasses.fields(module) if f.name != _MARK)
