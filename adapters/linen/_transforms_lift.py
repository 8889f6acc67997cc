"""Lifting core transforms (``adapters.core.lift``) to Linen modules and methods.

Every Linen transform is a core transform applied to a *method*: the module's scope (and
the scopes of modules and Variables passed as arguments or held in attributes) go through
``lift.pack`` into the transform, and inside it the method runs on a clone of the module
bound to the inner scopes. Naming state (autonames handed out inside) comes back to the
original module afterwards. Three entry points:

- ``module_class_lift_transform``: ``nn.vmap(Dense, ...)`` -> a subclass whose listed
  methods (default ``__call__``) are transformed.
- ``decorator_lift_transform``: ``nn.vmap(method, ...)`` as a method decorator.
- ``lift_direct_transform``: ``nn.vjp(fn, module, ...)`` called on a bound module.

The ``*_cached`` variants build the core transform once per method and pass the module
as a hashable key (``_HashableProxy``): ``nn.jit`` compiles once per module
configuration instead of once per call.
"""

import contextlib
import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .. import errors, serialization
from ..core import DenyList, LazyRng
from ._module._apply import _get_unbound_fn
from ._module._base import Module, wrap_method_once
from ._transforms_scopes import (
    _field_attrs,
    _test_transformed_return_values,
    get_module_scopes,
    set_module_scopes,
)


def _mark_handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    # A transformed method runs the original (wrapped) method on a clone inside the
    # transform; the outer call must not be wrapped again by the class machinery.
    fn.method_handler_wrapped = True  # type: ignore[attr-defined]
    return fn


def _run_on_clone(
    target: Module,
    fn: Callable[..., Any],
    scopes: Any,
    args: Any,
    kwargs: Any,
    state: Any,
    origin: Module,
    fn_name: str | None,
) -> Any:
    cloned, args, kwargs = set_module_scopes(target, args, kwargs, scopes)
    object.__setattr__(cloned, "_state", state.export())
    res = fn(cloned, *args, **kwargs)
    origin._state.reimport(cloned._state)
    _test_transformed_return_values(res, fn_name)
    return res


# ----------------------------------------------------------------------------- targets


def _class_trafo_args(methods: Any, trafo_args: Any, trafo_kwargs: Any) -> dict[str, Any]:
    if methods is None:
        return {"__call__": (trafo_args, trafo_kwargs)}
    if isinstance(methods, (list, tuple)):
        return {m: (trafo_args, trafo_kwargs) for m in methods}
    if isinstance(methods, dict):
        return {k: ((), v) for k, v in methods.items()}
    raise ValueError("transform methods argument must be None, tuple, list, or dict.")


def _split_partial(module_class: Any) -> tuple[Any, functools.partial[Any] | None]:
    func = getattr(module_class, "func", None)
    if (
        isinstance(module_class, functools.partial)
        and inspect.isclass(func)
        and issubclass(func, Module)
    ):
        return module_class.func, module_class
    return module_class, None


def _make_class(
    transform: Callable[..., Any], module_class: type, fns: dict[str, Any], partial: Any
) -> Any:
    name = getattr(transform, "__name__", "transformed").capitalize() + module_class.__name__
    cls = type(name, (module_class,), fns)
    if partial is not None:
        return functools.partial(cls, *partial.args, **partial.keywords)
    return cls


def module_class_lift_transform(
    transform: Callable[..., Any],
    module_class: Any,
    *trafo_args: Any,
    methods: Any = None,
    **trafo_kwargs: Any,
) -> Any:
    """A subclass of ``module_class`` whose ``methods`` run under ``transform``."""
    per_method = _class_trafo_args(methods, trafo_args, trafo_kwargs)
    module_class, partial = _split_partial(module_class)

    def create(fn_name: str, fn_trafo_args: Any) -> Callable[..., Any]:
        fn = getattr(module_class, fn_name)
        t_args, t_kwargs = fn_trafo_args

        @functools.wraps(fn)
        def wrapped_fn(self: Module, *args: Any, **kwargs: Any) -> Any:
            state = self._state.export()

            def core_fn(scopes: Any, *args: Any, **kwargs: Any) -> Any:
                base = module_class(parent=None, **_field_attrs(self))
                return _run_on_clone(base, fn, scopes, args, kwargs, state, self, fn_name)

            core_fn.__wrapped__ = fn  # type: ignore[attr-defined]  # messages name fn's arguments
            trafo_fn = transform(core_fn, *t_args, **t_kwargs)
            module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
            return trafo_fn(module_scopes, *args, **kwargs)

        return _mark_handled(wrapped_fn)

    fns = {name: create(name, a) for name, a in per_method.items()}
    return _make_class(transform, module_class, fns, partial)


def decorator_lift_transform(
    transform: Callable[..., Any],
    class_fn: Any,
    *trafo_args: Any,
    multi_scope: bool = True,
    **trafo_kwargs: Any,
) -> Callable[..., Any]:
    """A method (or tuple of methods, for multi-function transforms) transformed by
    ``transform``; use as a decorator on module methods."""
    class_fns = class_fn if isinstance(class_fn, tuple) else (class_fn,)
    prewrapped = [wrap_method_once(f) for f in class_fns]

    @functools.wraps(prewrapped[0])
    def wrapped_fn(self: Module, *args: Any, **kwargs: Any) -> Any:
        state = self._state.export()

        def core_fn(pre: Any, original: Any, scopes: Any, *args: Any, **kwargs: Any) -> Any:
            if not multi_scope:
                scopes = [scopes]
            name = getattr(original, "__name__", None)
            return _run_on_clone(self, pre, scopes, args, kwargs, state, self, name)

        core_fns = [functools.partial(core_fn, p, c) for p, c in zip(prewrapped, class_fns)]
        for core, original in zip(core_fns, class_fns):
            core.__wrapped__ = original  # type: ignore[attr-defined]  # its signature, the scope first
        trafo_fn = transform(*core_fns, *trafo_args, **trafo_kwargs)
        module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
        if not multi_scope:
            if len(module_scopes) != 1:
                raise NotImplementedError(
                    "This transform does not yet support Modules that include other Modules "
                    "passed as arguments."
                )
            module_scopes = module_scopes[0]
        return trafo_fn(module_scopes, *args, **kwargs)

    return _mark_handled(wrapped_fn)


# ----------------------------------------------------------------------------- cached


@dataclasses.dataclass(frozen=True, eq=False)
class _HashableProxy:
    """A module as a static (hashable) argument: equal when the fingerprints are."""

    module_ref: "weakref.ReferenceType[Module]"
    fingerprint: Any
    hash_key: int

    @classmethod
    def from_module(cls, module: Module) -> "_HashableProxy":
        fingerprint = _fingerprint(module, (), {})
        return cls(weakref.ref(module), fingerprint, hash(fingerprint))

    def __hash__(self) -> int:
        return self.hash_key

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _HashableProxy)
            and self.hash_key == other.hash_key
            and self.fingerprint == other.fingerprint
        )

    @property
    def module(self) -> Module:
        module = self.module_ref()
        assert module is not None
        return module


def _check_hashable(path: tuple[str, ...], x: Any) -> None:
    try:
        hash(x)
    except Exception as e:
        raise ValueError(f"Value at '{'/'.join(path)}' is not hashable: {e}") from e


def _fingerprint(obj: Any, path: tuple[str, ...], seen: dict[int, int]) -> Any:
    """A hashable summary of what tracing a module's method depends on: its class, its
    attributes (recursively) and its naming state."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, Module):
        if obj._id in seen:
            return (type(obj), seen[obj._id])
        seen[obj._id] = len(seen)
        parts: list[Any] = []
        for name, value in _field_attrs(obj).items():
            if name != "name":
                parts.append((name, _fingerprint(value, (*path, name), seen)))
        state = obj._state
        parts.append(
            (
                "_state",
                (
                    state.in_compact_method,
                    state.in_setup,
                    int(state.setup_called),
                    state.is_initialized,
                    tuple(sorted(state.autoname_cursor.items())),
                ),
            )
        )
        scope = obj.scope
        if scope is not None:
            # As in Flax: the rng counters (keys drawn inside a trace fold them in as
            # constants, so a call after draws retraces) and the names taken.
            reserved = tuple(
                sorted((k, tuple(sorted(map(str, v)))) for k, v in scope.reservations.items())
            )
            parts.append(
                (
                    "scope",
                    (
                        _fingerprint(scope.mutable, (*path, "mutable"), seen),
                        _fingerprint(scope.flags, (*path, "flags"), seen),
                        _fingerprint(scope.rng_counters, (*path, "rng_counts"), seen),
                        reserved,
                    ),
                )
            )
        return (type(obj), tuple(parts))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (
            type(obj),
            tuple(
                (f.name, _fingerprint(getattr(obj, f.name), (*path, f.name), seen))
                for f in dataclasses.fields(obj)
                if hasattr(obj, f.name)
            ),
        )
    if isinstance(obj, DenyList):
        return (type(obj), _fingerprint(obj.deny, (*path, "deny"), seen))  # type: ignore[attr-defined]
    if isinstance(obj, dict):
        return tuple((k, _fingerprint(v, (*path, str(k)), seen)) for k, v in obj.items())
    if serialization.is_serializable(obj):
        state = serialization.to_state_dict(obj)
        return (type(obj), _fingerprint(state, path, seen))
    if isinstance(obj, Mapping):
        return tuple((k, _fingerprint(v, (*path, str(k)), seen)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return (type(obj), tuple(_fingerprint(v, (*path, str(i)), seen) for i, v in enumerate(obj)))
    _check_hashable(path, obj)
    return obj


@contextlib.contextmanager
def fork_rngs(module: Module) -> Iterator[None]:
    """Replace the module's rng streams by one fresh key each for the duration (so a
    cached transform gets its keys as inputs rather than as trace constants)."""
    scope = module.scope
    if scope is None:
        yield
        return
    current = dict(scope.rngs)
    scope.rngs = {name: LazyRng.create(module.make_rng(name)) for name in current}
    try:
        yield
    finally:
        scope.rngs = current


def decorator_lift_transform_cached(
    transform: Callable[..., Any], class_fn: Any, **trafo_kwargs: Any
) -> Callable[..., Any]:
    """Like ``decorator_lift_transform``, but the core transform is built once and gets
    the module as a static hashable key (its second argument)."""
    class_fns = class_fn if isinstance(class_fn, tuple) else (class_fn,)
    prewrapped = [wrap_method_once(f) for f in class_fns]
    cell: list[Any] = []

    @functools.wraps(prewrapped[0])
    def wrapped_fn(self: Module, *args: Any, **kwargs: Any) -> Any:
        state = self._state.export()
        with fork_rngs(self):
            if not cell:

                def core_fn(
                    pre: Any, original: Any, scopes: Any, key: Any, *a: Any, **k: Any
                ) -> Any:
                    origin = key.module
                    name = getattr(original, "__name__", None)
                    return _run_on_clone(origin, pre, scopes, a, k, key.state, origin, name)

                core_fns = [
                    functools.wraps(c)(functools.partial(core_fn, p, c))
                    for p, c in zip(prewrapped, class_fns)
                ]
                cell.append(transform(*core_fns, **trafo_kwargs))
            module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
            key = _StatefulKey.from_module(self, state)
            return cell[0](module_scopes, key, *args, **kwargs)

    return _mark_handled(wrapped_fn)


class _StatefulKey(_HashableProxy):
    """A ``_HashableProxy`` that also carries the exported state of the call."""

    state: Any = None

    @classmethod
    def from_module(cls, module: Module, state: Any = None) -> "_StatefulKey":  # type: ignore[override]
        fingerprint = _fingerprint(module, (), {})
        key = cls(weakref.ref(module), fingerprint, hash(fingerprint))
        object.__setattr__(key, "state", state)
        return key


def module_class_lift_transform_cached(
    transform: Callable[..., Any], module_class: Any, methods: Any = None, **trafo_kwargs: Any
) -> Any:
    """Like ``module_class_lift_transform``, with the core transform built once per
    method (see ``decorator_lift_transform_cached``)."""
    per_method = _class_trafo_args(methods, (), trafo_kwargs)
    module_class, partial = _split_partial(module_class)

    def create(fn_name: str, fn_trafo_args: Any) -> Callable[..., Any]:
        fn = getattr(module_class, fn_name)
        t_args, t_kwargs = fn_trafo_args
        cell: list[Any] = []

        def core_fn(scopes: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
            origin = key.module
            base = module_class(parent=None, **_field_attrs(origin))
            return _run_on_clone(base, fn, scopes, args, kwargs, key.state, origin, fn_name)

        @functools.wraps(fn)
        def wrapped_fn(self: Module, *args: Any, **kwargs: Any) -> Any:
            if self.scope is None:
                raise errors.CallCompactUnboundModuleError()
            state = self._state.export()
            with fork_rngs(self):
                if not cell:
                    cell.append(transform(core_fn, *t_args, **t_kwargs))
                module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
                key = _StatefulKey.from_module(self, state)
                return cell[0](module_scopes, key, *args, **kwargs)

        return _mark_handled(wrapped_fn)

    fns = {name: create(name, a) for name, a in per_method.items()}
    return _make_class(transform, module_class, fns, partial)


# ----------------------------------------------------------------------------- dispatch


def _is_module_class(target: Any) -> bool:
    if isinstance(target, functools.partial):
        return _is_module_class(target.func)
    return inspect.isclass(target) and issubclass(target, Module)


def lift_transform(
    transform: Callable[..., Any],
    target: Any,
    *trafo_args: Any,
    methods: Any = None,
    **trafo_kwargs: Any,
) -> Any:
    """Apply a core transform to a Module class (its ``methods``) or a module method."""
    if _is_module_class(target):
        return module_class_lift_transform(
            transform, target, *trafo_args, methods=methods, **trafo_kwargs
        )
    if callable(target) and not isinstance(target, Module):
        return decorator_lift_transform(transform, target, *trafo_args, **trafo_kwargs)
    raise errors.TransformTargetError(target)


def lift_transform_cached(
    transform: Callable[..., Any],
    target: Any,
    *trafo_args: Any,
    methods: Any = None,
    **trafo_kwargs: Any,
) -> Any:
    """``lift_transform`` for transforms taking the module key (``jit``, ``fold_rngs``)."""
    if _is_module_class(target):
        return module_class_lift_transform_cached(
            transform, target, *trafo_args, methods=methods, **trafo_kwargs
        )
    if callable(target) and not isinstance(target, Module):
        return decorator_lift_transform_cached(transform, target, *trafo_args, **trafo_kwargs)
    raise errors.TransformTargetError(target)


def lift_direct_transform(
    transform: Callable[..., Any],
    targets: Iterable[Callable[..., Any]],
    mdl: Module,
    *args: Any,
    multi_scope: bool = True,
    **kwargs: Any,
) -> Any:
    """Run a multi-function core transform of ``targets`` (functions of a module) on the
    bound module ``mdl`` right away."""
    targets = tuple(targets)
    for target in targets:
        if _is_module_class(target):
            raise ValueError(
                f"The {getattr(transform, '__name__', 'transform')} transform can only be "
                "applied on a Module method. That is function that takes a Module instance as "
                "its first arg."
            )
        if not callable(target):
            raise ValueError("transform target must be callable")
    targets = tuple(_get_unbound_fn(t) for t in targets)

    def aug_transform(*fns: Any) -> Any:
        return functools.partial(transform, *fns)

    return decorator_lift_transform(aug_transform, targets, multi_scope=multi_scope)(
        mdl, *args, **kwargs
    )
