"""The Linen ``Module`` class: dataclass transform, naming, lazy ``setup``, method wrapping.

A module instance is a frozen-looking dataclass. When it has a parent (a module whose
``setup`` or ``@compact`` method is running, or a core ``Scope``) it is *bound*: it owns a
child ``Scope`` named after it and all its variables live there. Unbound modules are
templates; ``init``/``apply``/``bind`` clone them onto a fresh root scope.

The invariants this file keeps:

- ``parent`` and ``name`` are the last dataclass fields, keyword-only; ``parent`` defaults
  to the module whose method is running (the thread's module stack).
- Submodules get their name when attached: an explicit ``name``, the attribute they are
  assigned to in ``setup`` (``layers_0`` for containers), or ``ClassName_N`` in creation
  order inside a ``@compact`` method.
- ``setup`` runs lazily, once, on a bound module: before the first wrapped method call or
  the first access to an attribute it defines.
- Outside ``setup`` (and ``__post_init__``) a module is frozen.
"""

import dataclasses
import functools
import itertools
import typing
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import jax

from ... import errors
from ...core import FrozenDict, Scope
from ._apply import _ApplyMixin
from ._context import (
    _config_flag,
    _context,
    _derive_profiling_name,
    _global_interceptor_stack,
    _named_call_enabled,
    _ParentSentinel,
    _unspecified_parent,
    run_interceptors,
)
from ._dataclass import (
    DescriptorWrapper as DescriptorWrapper,
)
from ._dataclass import (
    _dataclass_transform,
    wrap_descriptor_once,
)
from ._marker import ModuleBase, module_field
from ._repr import _module_repr
from ._state import SetupState, _ModuleInternalState, _uninitialized_module_internal_state
from ._tree import (
    _freeze_attr,
    _get_local_descriptor_names,
    _get_local_method_names,
    _map_over_modules_in_tree,
    _map_submodules,
)

M = TypeVar("M", bound="Module")
_CallableT = TypeVar("_CallableT", bound=Callable[..., Any])


# Methods copy/pickle look up on instances: a module never defines them lazily in setup.
_UNDEFINED_COPY_PICKLE_METHODS = (
    "__getstate__",
    "__setstate__",
    "__getnewargs_ex__",
    "__reduce__",
    "__reduce_ex__",
    "__copy__",
    "__deepcopy__",
)

_ids = itertools.count()

# Per root scope: original module id -> its adopted clone, so a module passed in twice
# (shared by reference) is adopted once.
_adoption_caches: "weakref.WeakKeyDictionary[Scope, weakref.WeakValueDictionary[int, Module]]" = (
    weakref.WeakKeyDictionary()
)


# ----------------------------------------------------------------------------- decorators


def compact(fun: _CallableT) -> _CallableT:
    """Mark a method as compact: it may define parameters and submodules inline."""
    fun.compact = True  # type: ignore[attr-defined]
    return fun


def nowrap(fun: _CallableT) -> _CallableT:
    """Leave a method unwrapped: no lazy setup, no module stack entry, no interceptors.

    Use it for helpers that build submodules for their caller (their parent is then the
    module whose method called the helper).
    """
    fun.nowrap = True  # type: ignore[attr-defined]
    return fun


def _get_fn_name(fn: Callable[..., Any]) -> str:
    if isinstance(fn, functools.partial):
        return _get_fn_name(fn.func)
    return getattr(fn, "__name__", "unnamed_function")


def wrap_method_once(fun: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a module method so calls go through ``Module._call_wrapped_method``."""
    if getattr(fun, "method_handler_wrapped", False):
        return fun

    @functools.wraps(fun)
    def wrapped_module_method(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], Module):
            return args[0]._call_wrapped_method(fun, args[1:], kwargs)
        return fun(*args, **kwargs)

    wrapped_module_method.method_handler_wrapped = True  # type: ignore[attr-defined]
    return wrapped_module_method


# ----------------------------------------------------------------------------- descriptors


class ParentDescriptor:
    """Stores ``parent`` as a weak reference when it is a module (no parent/child cycles)."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return None
        parent = obj.__dict__.get("_parent_ref")
        return parent() if isinstance(parent, weakref.ReferenceType) else parent

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_parent_ref"] = weakref.ref(value) if isinstance(value, Module) else value


# ----------------------------------------------------------------------------- Module


class Module(ModuleBase, _ApplyMixin):
    """Base class of Linen modules.

    Subclasses are dataclasses: annotated class attributes are constructor arguments.
    Submodules and variables are defined in ``setup`` or inline in a ``@compact``
    method; ``init``/``apply`` run a method on variables. See Flax's ``flax.linen.Module``.
    """

    if not typing.TYPE_CHECKING:  # declared on ModuleBase (not a dataclass field)
        scope = None
    _state = _uninitialized_module_internal_state
    _parent_ref = None
    _compact_name_scope_methods = ()
    _init_field_names = ()
    if typing.TYPE_CHECKING:
        # Every subclass gets these as its last (keyword-only) dataclass fields.
        name: str | None = module_field(kw_only=True, default=None)
        parent: Any = module_field(kw_only=True, default=None)

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __init_subclass__(cls, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _dataclass_transform(cls, kw_only, _ParentType)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        cls._init_field_names = tuple(
            f.name for f in fields if f.init and f.name not in ("parent", "name")
        )
        cls._compact_name_scope_methods = tuple(
            n for n in dir(cls) if getattr(getattr(cls, n, None), "compact_name_scope", False)
        )
        field_names = [f.name for f in fields]
        exclusions = [*field_names, "__eq__", "__repr__", "__init__", "__hash__", "__post_init__"]
        for key in _get_local_method_names(cls, exclude=exclusions):
            method = cls.__dict__[key]
            if not getattr(method, "nowrap", False):
                setattr(cls, key, wrap_method_once(method))
        for key in _get_local_descriptor_names(cls, [*field_names, "parent", "__dict__"]):
            descriptor = cls.__dict__[key]
            if not getattr(descriptor, "nowrap", False):
                setattr(cls, key, wrap_descriptor_once(descriptor))
        cls._state = _uninitialized_module_internal_state
        cls.scope: Scope | None = None
        cls._parent_ref = None
        cls.parent = ParentDescriptor()  # type: ignore[assignment]

    # -- calling methods

    def _call_wrapped_method(self, fun: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Run a wrapped method: lazy setup, module stack, interceptors, capture."""
        is_compact = getattr(fun, "compact", False)
        fun_name = _get_fn_name(fun)
        is_setup = fun_name == "setup"
        state = self._state
        recurrent = False
        if is_setup:
            if self.scope is None:
                raise errors.CallSetupUnboundModuleError()
            recurrent = state.in_setup
            state.in_setup = True
        else:
            self._try_setup()
        if is_compact:
            if self.scope is None:
                raise errors.CallCompactUnboundModuleError()
            recurrent = state.in_compact_method
            state.in_compact_method = True
        stack = _context.module_stack
        stack.append(self)
        try:
            call_infos = _context.call_info_stack
            record = bool(call_infos) and not is_setup
            if record:
                call_index = call_infos[-1].get_call_index()
            if len(_global_interceptor_stack):
                run: Callable[..., Any] = functools.partial(run_interceptors, fun)
            else:
                run = fun
            if _named_call_enabled():
                with jax.named_scope(_derive_profiling_name(self, fun)):
                    y = run(self, *args, **kwargs)
            else:
                y = run(self, *args, **kwargs)
            captures = _context.capture_stack
            if captures:
                filter_fn = captures[-1]
                if filter_fn and filter_fn(self, fun_name):
                    self.sow("intermediates", fun_name, y)
            if record:
                call_infos[-1].record(call_index, self, fun_name, args, kwargs, y)  # type: ignore[possibly-undefined]
            return y
        finally:
            stack.pop()
            if is_compact:
                object.__setattr__(self, "scope", self.scope.rewound())  # type: ignore[union-attr]
            if (is_compact or is_setup) and not recurrent:
                state.reset()

    # -- attributes

    def __setattr__(self, name: str, val: Any) -> None:
        """Outside ``setup`` a module is frozen; in ``setup`` assigned submodules (also in
        lists/dicts/tuples) are named after the attribute."""
        state = self._state
        if not state.in_setup:
            if not state.is_initialized or name.startswith("__"):
                object.__setattr__(self, name, val)
                return
            raise errors.SetAttributeFrozenModuleError(type(self).__name__, name, val)
        field = self.__dataclass_fields__.get(name)  # type: ignore[attr-defined]
        if field is not None and field.init:
            raise errors.SetAttributeInModuleSetupError()
        self._register_submodules(name, val)

    def __getattr__(self, name: str) -> Any:
        """Run ``setup`` (if bound and not run yet) and look ``name`` up again."""
        if name in _UNDEFINED_COPY_PICKLE_METHODS:
            raise AttributeError(name)
        self._try_setup()
        found = self.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            return found
        msg = f'"{type(self).__name__}" object has no attribute "{name}".'
        if self.scope is None:
            msg += (
                f" If \"{name}\" is defined in '.setup()', remember these fields are only "
                "accessible from inside 'init' or 'apply'."
            )
        raise AttributeError(msg)

    def __dir__(self) -> list[str]:
        self._try_setup()
        return list(object.__dir__(self))

    # -- attachment and naming

    def __post_init__(self) -> None:
        object.__setattr__(self, "_id", next(_ids))
        state = _ModuleInternalState()
        object.__setattr__(self, "_state", state)
        parent = self.parent
        if parent is _unspecified_parent:
            parent = _context.module_stack[-1]
            object.__setattr__(self, "parent", parent)
        if parent is None:
            return  # a template: attached later (by assignment or init/apply)
        if isinstance(parent, Module):
            pstate = parent._state
            if pstate.in_setup and self.name is None:
                return  # named when assigned to an attribute of the parent
            if not parent._initialization_allowed:
                raise errors.AssignSubModuleError(type(self).__name__)
            if parent.scope is None:
                raise errors.AssignSubModuleError(type(self).__name__)
            if self.name is None:
                prefix = type(self).__name__
                cursor = pstate.autoname_cursor.get(prefix, 0)
                object.__setattr__(self, "name", f"{prefix}_{cursor}")
                pstate.autoname_cursor[prefix] = cursor + 1
            reuse = pstate.in_setup and pstate.setup_called == SetupState.TRANSFORMED
            if parent._name_taken(self.name, reuse_scopes=reuse):  # type: ignore[arg-type]
                raise errors.NameInUseError("submodule", self.name, type(parent).__name__)
            pstate.children[self.name] = self  # type: ignore[index]
            object.__setattr__(self, "scope", parent.scope.push(self.name, reuse=reuse))
        elif isinstance(parent, Scope):
            object.__setattr__(self, "scope", parent)
        else:
            raise ValueError("parent must be None, Module or Scope")
        if self.scope is not None:
            self._register_field_submodules()
        state.is_initialized = True

    def _register_field_submodules(self) -> None:
        d = self.__dict__
        for field_name in self._init_field_names:
            if field_name in d:
                val = d[field_name]
                if not _holds_nothing_to_adopt(val):
                    self._register_submodules(field_name, val)

    def _register_submodules(self, name: str, val: Any) -> None:
        """Store attribute ``name``, adopting (cloning and naming) the modules in it."""
        scope = self.scope
        if scope is None:
            raise ValueError("Trying to register submodules on an unbound module.")
        if _holds_nothing_to_adopt(val):
            object.__setattr__(self, name, val)  # no module to adopt, nothing to freeze
            return
        root = scope.root
        cache = _adoption_caches.get(root)
        if cache is None:
            cache = _adoption_caches[root] = weakref.WeakValueDictionary()
        preserve = getattr(type(self), "preserve_adopted_names", None)
        if preserve is None:
            preserve = _config_flag("flax_preserve_adopted_names")
        queue: list[Module] = []

        def adopt(suffix: str, sub: Any) -> Any:
            if not isinstance(sub, Module):
                return sub
            current_name = sub.name
            adopted_name = None
            if sub.parent is None:
                key = sub._id
                if preserve:
                    adopted_name = current_name
                hit = cache.get(key)
                if hit is not None:
                    sub = hit
                else:
                    sub = sub.clone(name=None)
                    cache[key] = sub
            if sub.name is None:
                object.__setattr__(sub, "parent", self)
                if adopted_name is None:
                    if isinstance(sub, CompactNameScope):
                        adopted_name = current_name
                    else:
                        adopted_name = f"{name}{suffix}"
                object.__setattr__(sub, "name", adopted_name)
                queue.append(sub)
            return sub

        val = _freeze_attr(_map_over_modules_in_tree(adopt, val))
        object.__setattr__(self, name, val)
        for sub in queue:
            sub.__post_init__()

    def _name_taken(
        self, name: str, reuse_scopes: bool = False, collection: str | None = None
    ) -> bool:
        if reuse_scopes:
            return False
        scope = self.scope
        if scope is None:
            raise ValueError("Can't access variables on unbound modules")
        return scope.name_reserved(name, collection)

    @property
    def _initialization_allowed(self) -> bool:
        state = self._state
        return not state.is_initialized or state.in_setup or state.in_compact_method

    # -- setup

    def setup(self) -> None:
        """Define submodules and variables; runs lazily, once, on a bound module."""

    def _try_setup(self, shallow: bool = False) -> None:
        """Run ``setup`` if bound and not done yet (``shallow``: only adopt the modules
        held by dataclass fields, as lifted transforms need before they run)."""
        state = self._state
        if self.scope is None or state.in_setup or state.setup_called == SetupState.DONE:
            return
        try:
            state.in_setup = True
            self._register_field_submodules()
            if not shallow:
                self.setup()
                if self._compact_name_scope_methods:
                    self._setup_compact_name_scopes()
            elif state.setup_called == SetupState.NEW:
                self._validate_setup()
        finally:
            state.in_setup = False
            if not shallow:
                state.setup_called = SetupState.DONE

    def _validate_setup(self) -> None:
        """Run ``setup`` abstractly on a throwaway clone, so that name collisions and
        other Python errors in it surface before a lifted transform runs it."""
        if type(self).setup is Module.setup:
            return  # nothing to check

        def run_setup_only(x: Any) -> Any:
            with TestScope({}, rngs={}, mutable=True).temporary() as root:
                return _identity_method(self.clone(parent=root), x)

        jax.eval_shape(run_setup_only, 0)

    def _setup_compact_name_scopes(self) -> None:
        ref = weakref.ref(self)
        modules = {
            n: CompactNameScope(
                getattr(type(self), n).inner_fun,  # type: ignore[call-arg]
                ref,  # pyright: ignore[reportArgumentType]  # called, it gives the module
                parent=None,
                name=n,
            )
            for n in self._compact_name_scope_methods
        }
        self._register_submodules("_compact_name_scope_modules", modules)

    # -- identity, copies

    def __repr__(self) -> str:
        return _module_repr(self)

    @property
    def path(self) -> tuple[str, ...]:
        """Names from the root module to this one (``()`` for the root); bound modules only."""
        if self.scope is None:
            raise ValueError("Can't access module paths on unbound modules.")
        return self.scope.path

    def clone(
        self: M,
        *,
        parent: Any = None,
        _deep_clone: bool | weakref.WeakValueDictionary[int, Any] = False,
        _reset_names: bool = False,
        **updates: Any,
    ) -> M:
        """A new instance with the same attributes (``updates`` replacing some).

        The clone has ``parent`` (default: none, i.e. unbound). With ``_deep_clone``
        the submodules held in attributes are cloned too (shared ones once), and with
        ``_reset_names`` their names are dropped.
        """
        d = self.__dict__
        attrs: dict[str, Any] = {n: d[n] for n in self._init_field_names if n in d}
        attrs["name"] = d.get("name", None)
        attrs["parent"] = parent
        attrs.update(updates)
        if _deep_clone is not False:
            cache: weakref.WeakValueDictionary[int, Any] = (
                weakref.WeakValueDictionary() if isinstance(_deep_clone, bool) else _deep_clone
            )

            def clone_fn(m: Module) -> Module:
                key = m.__dict__.get("_id")
                if key is None:
                    return m
                hit = cache.get(key)
                if hit is not None:
                    return hit
                if _reset_names:
                    new = m.clone(_deep_clone=cache, _reset_names=True, name=None)
                else:
                    new = m.clone(_deep_clone=cache)
                cache[key] = new
                return new

            for key, value in attrs.items():
                if key != "parent":
                    attrs[key] = _map_submodules(clone_fn, value)
        return type(self)(**attrs)

    def copy(
        self: M,
        *,
        parent: Any = _unspecified_parent,
        name: str | None = None,
        **updates: Any,
    ) -> M:
        """A deep copy (submodules cloned) attached to ``parent`` (default: the module
        whose method is running), named ``name`` or automatically."""
        return self.clone(parent=parent, name=name, _deep_clone=True, _reset_names=False, **updates)


_MISSING = object()

_ATOMS = frozenset({int, float, bool, str, complex, bytes, type(None)})


def _holds_nothing_to_adopt(val: Any) -> bool:
    """Whether attribute ``val`` holds no module and no mutable container: storing it
    as is equals adopting and freezing it (the fast path of most dataclass fields)."""
    t = type(val)
    if t in _ATOMS:
        return True
    if t is tuple:
        return all(_holds_nothing_to_adopt(v) for v in val)
    return not isinstance(val, (Module, dict, FrozenDict, list, tuple))


# The root scope of ``_validate_setup``'s abstract run: every rng is a constant key.
TestScope = type("TestScope", (Scope,), {"make_rng": lambda self, name="params": jax.random.key(0)})


@wrap_method_once
def _identity_method(module: Any, x: Any) -> Any:
    return x


# The annotation of every subclass's ``parent`` field (needs ``Module`` itself).
_ParentType = Module | Scope | _ParentSentinel | None


class CompactNameScope(Module):
    """The child module behind a ``@compact_name_scope`` method: runs the method's body
    with this module as the naming scope of what it creates (adopted under its own name)."""

    fn: Callable[..., Any]
    module_fn: Callable[[], Module]

    @compact
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(self.module_fn(), *args, **kwargs)
