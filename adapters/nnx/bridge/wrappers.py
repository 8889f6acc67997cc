"""``flax.nnx.bridge.wrappers``: a Linen module inside NNX code and the other way round.

``ToNNX(linen_module, rngs)`` is an NNX Module that owns the Linen module's variables as
NNX Variables (attributes named after the variables). They are created by a first call in
"initializing" mode (``lazy_init``, which runs ``linen_module.init``); later calls run
``linen_module.apply`` on them and write back the collections the call may change.

``ToLinen(nnx_class, args, kwargs)`` is a Linen Module that builds the NNX module inside
its ``__call__``: at init it keeps the module's Variables as Linen variables (in their
collections, metadata in Linen boxes); at apply it rebuilds the module, loads them and
writes back what changed.
"""

import dataclasses
import functools
import typing as tp
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import jax

from ... import core, linen
from ...core import FrozenDict, meta
from .. import filterlib, graphlib, pytreelib, rnglib, statelib, traversals, variablelib
from ..module import Module
from ..rnglib import Rngs
from . import module as bdg_module
from . import variables as bv

M = TypeVar("M", bound=Module)


@dataclasses.dataclass
class Functional(Generic[M]):
    """An NNX module class with its constructor arguments, used the functional way:
    ``state = f.init(rngs=...)``, then ``f.apply(state)(*args)``."""

    module_type: type[M]
    graphdef: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def init(self, *, rngs: Rngs | None = None) -> Any:
        """Build the module and return its State (keeping its GraphDef)."""
        extra = {} if rngs is None else {"rngs": rngs}
        module = self.module_type(*self.args, **self.kwargs, **extra)
        self.graphdef, state = graphlib.split(module)
        return state

    def apply(self, *states: Any) -> Any:
        """``graphdef.apply(*states)``: a callable returning ``(output, new_state)``."""
        assert self.graphdef is not None
        return self.graphdef.apply(*states)


def functional(cls: type[M]) -> Callable[..., Functional[M]]:
    """``functional(cls)(*args, **kwargs)`` is a ``Functional`` of ``cls(*args, **kwargs)``."""

    def make(*args: Any, **kwargs: Any) -> Functional[M]:
        return Functional(cls, None, args, kwargs)

    return make


def _set_initializing(module: Any, initializing: bool) -> None:
    """Set the "initializing" flag of every NNX object in ``module``'s graph."""
    for _, value in graphlib.iter_graph(module):
        if isinstance(value, pytreelib.Pytree):
            value._pytree__state._initializing = initializing


def lazy_init(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` (an NNX Module or one of its bound methods) with every object of its
    graph in initializing mode, so that the ``ToNNX`` modules it reaches create their
    variables. Returns ``fn``."""
    if isinstance(fn, Module):
        module = fn
    else:
        owner = getattr(fn, "__self__", None)
        if not isinstance(owner, Module):
            raise ValueError(f"{fn = } needs to be a method of an NNX Module.")
        module = owner
    _set_initializing(module, True)
    try:
        fn(*args, **kwargs)  # type: ignore[operator]
    finally:
        _set_initializing(module, False)
    return fn


def current_linen_module() -> linen.Module | None:
    """The innermost Linen module being run, if any."""
    stack = linen.module._context.module_stack
    return stack[-1] if stack else None  # type: ignore[return-value]


def _rng_dict(rngs: Any) -> dict[str, Any]:
    """``rngs`` (Rngs, a key or None) as Linen's ``{stream: key}``; ``default`` stands
    for ``params`` when there is no ``params`` stream."""
    if isinstance(rngs, Rngs):
        keys = {name: stream() for name, stream in rngs.items()}
    elif isinstance(rngs, jax.Array):
        keys = {"params": rngs}
    else:
        keys = {}
    if "params" not in keys and "default" in keys:
        keys["params"] = keys.pop("default")
    return keys


class ToNNX(Module):
    """A Linen module as an NNX Module.

    Its variables appear after a call in initializing mode (``model.lazy_init(x)`` or
    ``bridge.lazy_init(model, x)``); afterwards ``model(x)`` is the Linen ``apply``.

    Args:
      module: the Linen module.
      rngs: ``nnx.Rngs`` (forked for this module) or a key used as the ``params`` stream.
    """

    def __init__(self, module: linen.Module, rngs: Rngs | jax.Array | None = None) -> None:
        self.to_nnx__module = module
        self.to_nnx__rngs: Rngs | None
        if isinstance(rngs, jax.Array):
            self.to_nnx__rngs = Rngs(params=rngs)
        elif isinstance(rngs, Rngs):
            self.to_nnx__rngs = rngs.fork()
        else:
            self.to_nnx__rngs = rngs

    @property
    def rngs(self) -> Rngs | None:
        """Deprecated name of ``to_nnx__rngs``."""
        warnings.warn(
            "`ToNNX.rngs` is deprecated. Please use `to_nnx__rngs` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.to_nnx__rngs

    @property
    def module(self) -> linen.Module:
        """Deprecated name of ``to_nnx__module``."""
        warnings.warn(
            "`ToNNX.module` is deprecated. Please use `to_nnx__module` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.to_nnx__module

    def _setattr(self, name: str, value: Any) -> None:
        # Variable trees arriving from Linen are data even inside plain containers.
        if not pytreelib.is_data(value) and pytreelib.has_data(value):
            value = pytreelib.data(value)
        super()._setattr(name, value)

    def lazy_init(self, *args: Any, **kwargs: Any) -> "ToNNX":
        """``bridge.lazy_init(self, *args, **kwargs)``."""
        return lazy_init(self, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # A method of the Linen module runs through __call__(method=...).
        linen_module = vars(self).get("to_nnx__module")
        linen_method = None if linen_module is None else getattr(type(linen_module), name, None)
        if callable(linen_method):
            method = functools.partial(self.__call__, method=linen_method)
            method.__self__ = self  # type: ignore[attr-defined]
            return method
        return object.__getattribute__(self, name)

    def _variable_attrs(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in vars(self).items()
            if not k.startswith("to_nnx__") and not k.startswith("_pytree__")
        }

    def _default_mutable(self) -> Any:
        """The collections a call may change: those of the enclosing bridge or Linen
        module, else none."""
        for outer in (bdg_module.current_module(), current_linen_module()):
            if outer is not None and outer.scope is not None:
                return outer.scope.mutable
        return False

    def __call__(
        self,
        *args: Any,
        rngs: Rngs | jax.Array | None = None,
        method: Callable[..., Any] | str | None = None,
        mutable: Any = None,
        **kwargs: Any,
    ) -> Any:
        keys = _rng_dict(self.to_nnx__rngs if rngs is None else rngs)
        linen_module = self.to_nnx__module
        if self._pytree__state.initializing:
            out, updates = linen_module.init_with_output(keys, *args, method=method, **kwargs)
        else:
            variables = bv.nnx_attrs_to_linen_vars(self._variable_attrs())
            if mutable is None:
                mutable = self._default_mutable()
            out = linen_module.apply(
                variables, *args, rngs=keys, method=method, mutable=mutable, **kwargs
            )
            out, updates = out if mutable is not False else (out, None)
        if updates:
            self._store(updates)
        return out

    def _store(self, updates: Mapping[str, Any]) -> None:
        """Write Linen variable collections back as this module's Variable attributes."""
        for name, value in bv.linen_vars_to_nnx_attrs(updates).items():
            if hasattr(self, name) and isinstance(value, dict):
                merged = bv._recursive_merge(getattr(self, name), value)
                setattr(self, name, pytreelib.data(merged))
            else:
                setattr(self, name, pytreelib.data(value))


def linen_rngs_dict(linen_module: linen.Module, add_default: bool = False) -> dict[str, Any]:
    """One new key from each RNG stream of a running Linen module (``default`` added as
    ``0`` when asked and absent)."""
    assert linen_module.scope is not None, "linen_rngs_dict() must be called inside a Linen module."
    keys: dict[str, Any] = {
        name: linen_module.make_rng(name) for name in linen_module.scope.rngs.keys()
    }
    if add_default and "default" not in keys:
        keys["default"] = 0
    return keys


def _get_module_method(module: Any, method: Callable[..., Any] | str | None) -> Callable[..., Any]:
    """The unbound method to run (``__call__`` by default); a TypeError if not callable."""
    if method is None:
        method = "__call__"
    if isinstance(method, str):
        attribute = method
        method = getattr(type(module), attribute)
        if not callable(method):
            raise TypeError(
                f"'{type(module).__name__}.{attribute}' must be a callable, got {type(method)}."
            )
    if not callable(method):
        raise TypeError(f"'{method}' must be a callable, got {type(method)}.")
    return method


def _unbox(x: Any) -> Any:
    return x.unbox() if isinstance(x, meta.AxisMetadata) else x


class ToLinen(linen.Module):
    """An NNX module class as a Linen module.

    The NNX module is built from ``nnx_class(*args, **kwargs, rngs=...)`` with keys from
    the Linen RNG streams; at init its Variables (RNG state excepted) become Linen
    variables in their collections (``metadata_fn`` turns each into its Linen value,
    by default ``bridge.variables.to_linen_var``); at apply they are loaded back into a
    freshly built module, the method runs, and the mutable collections are written back.

    Attributes:
      nnx_class: the NNX Module class (or any callable building the module).
      args: positional arguments of ``nnx_class``.
      kwargs: keyword arguments of ``nnx_class``.
      skip_rng: do not pass ``rngs`` to ``nnx_class``.
      metadata_fn: Variable -> Linen value; ``None`` stores bare values.
    """

    nnx_class: Callable[..., Module]
    args: tp.Sequence[Any] = ()
    kwargs: Mapping[str, Any] = FrozenDict({})
    skip_rng: bool = False
    metadata_fn: Callable[[variablelib.Variable], Any] | None = bv.to_linen_var

    def _build(self) -> Module:
        module_kwargs = dict(self.kwargs)
        if not self.skip_rng:
            keys = linen_rngs_dict(self, add_default=not self.is_initializing())
            module_kwargs["rngs"] = Rngs(**keys)
        return self.nnx_class(*self.args, **module_kwargs)

    @linen.compact
    def __call__(
        self, *args: Any, nnx_method: Callable[..., Any] | str | None = None, **kwargs: Any
    ) -> Any:
        module = self._build()
        if self.is_initializing():
            self._update_variables(module)
            return _get_module_method(module, nnx_method)(module, *args, **kwargs)
        self._load_variables(module)
        out = _get_module_method(module, nnx_method)(module, *args, **kwargs)
        self._update_variables(module)
        return out

    def _load_variables(self, module: Module) -> None:
        """Put this Linen module's variables into ``module`` (warning about paths the
        module does not have)."""
        collections = jax.tree.map(
            _unbox,
            list(core.unfreeze(self.variables).values()),
            is_leaf=lambda x: isinstance(x, meta.AxisMetadata),
        )
        new_state = statelib.merge_state(*(collections or [{}]))
        incoming = traversals.flatten_mapping(new_state)
        current = traversals.flatten_mapping(graphlib.state(module))
        unknown = [path for path in incoming if path not in current]
        if unknown:
            listed = "".join(f"\n  - {'/'.join(map(str, p))}" for p in unknown)
            warnings.warn(f"Found unknown module paths in incoming state:{listed}", stacklevel=2)
        graphlib.update(module, new_state)

    def __getattr__(self, name: str) -> Any:
        # The NNX module's constructor keywords read as attributes, its methods run
        # through __call__(nnx_method=...); anything else is Linen's lookup.
        fields = self.__dict__
        if not name.startswith("_") and "kwargs" in fields and "nnx_class" in fields:
            if name in fields["kwargs"]:
                return fields["kwargs"][name]
            nnx_method = getattr(fields["nnx_class"], name, None)
            if callable(nnx_method):
                method = functools.partial(self.__call__, nnx_method=nnx_method)
                method.__self__ = self  # type: ignore[attr-defined]
                return method
        return super().__getattr__(name)

    def _linen_value(self, x: Any) -> Any:
        if not isinstance(x, variablelib.Variable):
            return x
        if self.metadata_fn is not None:
            return self.metadata_fn(x)
        return x.get_value()

    def _update_variables(self, module: Module) -> None:
        """Store the NNX module's Variables (not its RNG state) as Linen variables, one
        collection per Variable type, in the collections that are mutable now."""
        state = graphlib.state(module, filterlib.Not(rnglib.RngState))
        by_collection: dict[str, dict[tuple[Any, ...], Any]] = {}
        for path, leaf in statelib.to_flat_state(state):
            collection = variablelib.variable_name_from_type(type(leaf), allow_register=True)
            by_collection.setdefault(collection, {})[tuple(path)] = leaf
        for collection, flat in by_collection.items():
            if not self.is_mutable_collection(collection):
                continue
            tree = traversals.unflatten_mapping(flat)
            tree = jax.tree.map(
                self._linen_value, tree, is_leaf=lambda x: isinstance(x, variablelib.Variable)
            )
            for key, value in tree.items():
                self.put_variable(collection, key, value)


class _Missing:
    """Marks an argument that was not passed."""


_MISSING: Any = _Missing()


def to_linen(
    nnx_class: Callable[..., Module],
    *args: Any,
    metadata_fn: Callable[[variablelib.Variable], Any] | None = bv.to_linen_var,
    name: str | None = None,
    skip_rng: bool = False,
    abstract_init: bool = True,
    **kwargs: Any,
) -> ToLinen:
    """``ToLinen(nnx_class, args=args, kwargs=kwargs, ...)`` in one call."""
    return ToLinen(
        nnx_class,
        args=args,
        kwargs=FrozenDict(kwargs),
        metadata_fn=metadata_fn,
        skip_rng=skip_rng,
        name=name,
    )


def to_linen_class(
    base_nnx_class: type[M],
    base_metadata_fn: Callable[[variablelib.Variable], Any] | None = bv.to_linen_var,
    base_skip_rng: bool = False,
    **partial_kwargs: Any,
) -> type[ToLinen]:
    """A ``ToLinen`` subclass with ``nnx_class`` and default constructor keywords fixed:
    ``LinenDense = to_linen_class(nnx.Linear)`` then ``LinenDense(in_features=2, ...)``.
    Its subclasses keep that constructor."""

    class ToLinenPartial(ToLinen):
        def __init_subclass__(cls, **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)

            def __init__(
                self: Any,
                args: Any = None,
                kwargs: Any = None,
                nnx_class: Any = None,
                skip_rng: Any = None,
                metadata_fn: Any = None,
                name: Any = _MISSING,
                parent: Any = _MISSING,
                **other_kwargs: Any,
            ) -> None:
                linen_kwargs = {}
                if parent is not _MISSING:
                    linen_kwargs["parent"] = parent
                if name is not _MISSING:
                    linen_kwargs["name"] = name
                ToLinen.__init__(
                    self,
                    nnx_class=nnx_class or base_nnx_class,
                    args=args or (),
                    metadata_fn=metadata_fn or base_metadata_fn,
                    skip_rng=skip_rng or base_skip_rng,
                    kwargs=FrozenDict({**partial_kwargs, **(kwargs or {}), **other_kwargs}),
                    **linen_kwargs,
                )

            cls.__init__ = __init__  # type: ignore[method-assign]

    return ToLinenPartial
