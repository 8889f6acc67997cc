"""Running Linen modules: ``init``, ``init_with_output``, ``apply``, ``lazy_init``,
``bind``/``unbind`` (methods of ``Module``) and the functional ``nn.init``/``nn.apply``.

All of them clone the module onto a root core ``Scope`` built by ``adapters.core``'s
``init``/``apply``/``bind`` (deep clone: submodules held in attributes are cloned too, so
no scope leaks into the caller's module) and run a method of the clone.
"""

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self

import jax

import pytreemod as pm

from ... import core, errors
from ...core import DenyList, FrozenDict, freeze
from ...core._apply import _is_valid_rng
from . import _summary
from ._context import _config_flag, _context, intercept_methods
from ._marker import ModuleBase
from ._variables import _VariablesMixin

_NO_INTERMEDIATES = DenyList("intermediates")


def capture_call_intermediates(_: Any, method_name: str) -> bool:
    """The default ``capture_intermediates`` filter: every ``__call__`` output."""
    return method_name == "__call__"


def _check_rng_dict(rngs: Mapping[str, Any], what: str) -> None:
    for value in rngs.values():
        if not _is_valid_rng(value):
            raise ValueError(
                f"{what} should be a ``jax.PRNGKey`` or a dictionary mapping strings to "
                "``jax.PRNGKey``."
            )


def _normalize_rngs(module: Any, rngs: Any) -> Any:
    if rngs is None or isinstance(rngs, Mapping):
        return rngs
    if not _is_valid_rng(rngs):
        raise errors.InvalidRngError(
            f"RNGs should be of shape (2,) or PRNGKey in Module {type(module).__name__}, but "
            f"rngs are: {rngs}"
        )
    return {"params": rngs}


def _union_intermediates(mutable: Any) -> Any:
    if mutable is True:
        return True
    if mutable is False or mutable is None:
        return "intermediates"
    if isinstance(mutable, (set, frozenset)):
        mutable = tuple(sorted(mutable))
    return pm.Any(pm.to_filter(mutable), "intermediates")


def _maybe_freeze(tree: Any) -> Any:
    if _config_flag("flax_return_frozendict"):
        return freeze(tree)
    return tree


def _module_checks(module: Any) -> None:
    if not isinstance(module, ModuleBase):
        raise errors.InvalidInstanceModuleError()
    if "_id" not in module.__dict__:
        raise errors.IncorrectPostInitOverrideError()


def _get_unbound_fn(method_or_fn: Any) -> Callable[..., Any]:
    """The plain function behind a bound method of a module; checked to take a module."""
    if inspect.ismethod(method_or_fn) and isinstance(method_or_fn.__self__, ModuleBase):
        method_or_fn = method_or_fn.__func__
    if not callable(method_or_fn) or len(inspect.signature(method_or_fn).parameters) < 1:
        raise errors.ApplyModuleInvalidMethodError(method_or_fn)
    return method_or_fn


def _resolve_method(module: Any, method: Any) -> Callable[..., Any]:
    if isinstance(method, str):
        attribute_name = method
        method = getattr(module, attribute_name)
        if not callable(method):
            raise TypeError(
                f"'{type(module).__name__}.{attribute_name}' must be a callable, got "
                f"{type(method)}."
            )
        if isinstance(method, ModuleBase):

            def call_submodule(self: Any, *args: Any, **kwargs: Any) -> Any:
                return getattr(self, attribute_name)(*args, **kwargs)

            method = call_submodule
    elif method is None:
        method = module.__call__
    return _get_unbound_fn(method)


def _scope_fn(fn: Callable[..., Any], module: Any, capture: Any) -> Callable[..., Any]:
    @functools.wraps(fn)
    def scope_fn(scope: core.Scope, *args: Any, **kwargs: Any) -> Any:
        _context.capture_stack.append(capture)
        try:
            return fn(module.clone(parent=scope, _deep_clone=True), *args, **kwargs)
        finally:
            _context.capture_stack.pop()

    return scope_fn


def _capture_and_mutable(capture_intermediates: Any, mutable: Any) -> tuple[Any, Any]:
    if capture_intermediates is True:
        capture_intermediates = capture_call_intermediates
    if capture_intermediates:
        mutable = _union_intermediates(mutable)
    return capture_intermediates, mutable


def apply(
    fn: Callable[..., Any],
    module: ModuleBase,
    mutable: Any = False,
    capture_intermediates: bool | Callable[[ModuleBase, str], bool] = False,
) -> Callable[..., Any]:
    """``fn(module, *args)`` as a pure function ``(variables, *args, rngs=None)``.

    ``fn`` receives a clone of ``module`` bound to the variables. Returns the output, or
    ``(output, mutated variables)`` when ``mutable`` is not ``False``.
    """
    capture, mutable = _capture_and_mutable(capture_intermediates, mutable)
    applied = core.apply(_scope_fn(fn, module, capture), mutable=mutable)

    @functools.wraps(fn)
    def wrapper(variables: Mapping[str, Any], *args: Any, rngs: Any = None, **kwargs: Any) -> Any:
        if isinstance(rngs, Mapping):
            _check_rng_dict(rngs, "The ``rngs`` argument passed to an apply function")
        out = applied(variables, *args, rngs=rngs, **kwargs)
        if mutable is not False:
            y, state = out
            return y, _maybe_freeze(state)
        return out

    return wrapper


def init_with_output(
    fn: Callable[..., Any],
    module: ModuleBase,
    mutable: Any = _NO_INTERMEDIATES,
    capture_intermediates: bool | Callable[[ModuleBase, str], bool] = False,
) -> Callable[..., tuple[Any, Any]]:
    """``fn(module, *args)`` as an init function ``(rngs, *args) -> (output, variables)``."""
    capture, mutable = _capture_and_mutable(capture_intermediates, mutable)
    initialized = core.init(_scope_fn(fn, module, capture), mutable=mutable)

    @functools.wraps(fn)
    def wrapper(rngs: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if isinstance(rngs, Mapping):
            _check_rng_dict(rngs, "First argument passed to an init function")
        elif not _is_valid_rng(rngs):
            raise ValueError(
                "First argument passed to an init function should be a ``jax.PRNGKey`` or a "
                "dictionary mapping strings to ``jax.PRNGKey``."
            )
        y, variables = initialized(rngs, *args, **kwargs)
        return y, _maybe_freeze(variables)

    return wrapper


def init(
    fn: Callable[..., Any],
    module: ModuleBase,
    mutable: Any = _NO_INTERMEDIATES,
    capture_intermediates: bool | Callable[[ModuleBase, str], bool] = False,
) -> Callable[..., Any]:
    """``fn(module, *args)`` as an init function ``(rngs, *args) -> variables``."""
    init_fn = init_with_output(fn, module, mutable, capture_intermediates)

    @functools.wraps(init_fn)
    def init_wrapper(*args: Any, **kwargs: Any) -> Any:
        return init_fn(*args, **kwargs)[1]

    return init_wrapper


class _ApplyMixin(_VariablesMixin):
    """``Module`` methods that run a module: init, apply, bind..."""

    if TYPE_CHECKING:

        def clone(self, **kwargs: Any) -> Self: ...

    def apply(
        self,
        variables: Mapping[str, Any],
        *args: Any,
        rngs: Any = None,
        method: Callable[..., Any] | str | None = None,
        mutable: Any = False,
        capture_intermediates: bool | Callable[[ModuleBase, str], bool] = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``method`` (default ``__call__``; a name or a function of the module) on
        ``variables``. Returns the output, or ``(output, mutated variables)`` if
        ``mutable`` is not ``False``. ``capture_intermediates`` sows method outputs
        (``True``: every ``__call__``; or a filter ``fn(module, method_name)``)."""
        _module_checks(self)
        rngs = _normalize_rngs(self, rngs)
        fn = _resolve_method(self, method)
        return apply(fn, self, mutable=mutable, capture_intermediates=capture_intermediates)(  # type: ignore[arg-type]
            variables, *args, rngs=rngs, **kwargs
        )

    def init_with_output(
        self,
        rngs: Any,
        *args: Any,
        method: Callable[..., Any] | str | None = None,
        mutable: Any = _NO_INTERMEDIATES,
        capture_intermediates: bool | Callable[[ModuleBase, str], bool] = False,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        """Initialize the variables by running ``method``; returns ``(output, variables)``.

        ``rngs`` is a key (the ``params`` stream) or ``{stream: key}``."""
        _module_checks(self)
        if not isinstance(rngs, Mapping):
            rngs = _normalize_rngs(self, rngs)
        fn = _resolve_method(self, method)
        return init_with_output(
            fn,
            self,  # type: ignore[arg-type]
            mutable=mutable,
            capture_intermediates=capture_intermediates,
        )(rngs, *args, **kwargs)

    def init(
        self,
        rngs: Any,
        *args: Any,
        method: Callable[..., Any] | str | None = None,
        mutable: Any = _NO_INTERMEDIATES,
        capture_intermediates: bool | Callable[[ModuleBase, str], bool] = False,
        **kwargs: Any,
    ) -> Any:
        """Initialize and return the variables (``init_with_output`` without the output)."""
        _module_checks(self)
        _, variables = self.init_with_output(
            rngs,
            *args,
            method=method,
            mutable=mutable,
            capture_intermediates=capture_intermediates,
            **kwargs,
        )
        return variables

    def lazy_init(
        self,
        rngs: Any,
        *args: Any,
        method: Callable[..., Any] | None = None,
        mutable: Any = _NO_INTERMEDIATES,
        **kwargs: Any,
    ) -> Any:
        """Initialize without running the computation: inputs may be
        ``jax.ShapeDtypeStruct``s (variables must not depend on their values)."""
        _module_checks(self)
        if not isinstance(rngs, Mapping):
            rngs = _normalize_rngs(self, rngs)
        fn = _resolve_method(self, method)
        module = self

        def scope_fn(scope: core.Scope, *a: Any, **k: Any) -> Any:
            return fn(module.clone(parent=scope, _deep_clone=True), *a, **k)

        return _maybe_freeze(core.lazy_init(scope_fn, mutable=mutable)(rngs, *args, **kwargs))

    def bind(
        self,
        variables: Mapping[str, Any],
        *args: Any,
        rngs: Mapping[str, Any] | None = None,
        mutable: Any = False,
    ) -> Self:
        """A copy of this module bound to ``variables`` (and ``rngs``), for interactive use."""
        _module_checks(self)
        del args
        scope = core.bind(variables, rngs=rngs, mutable=mutable)
        return self.clone(parent=scope, _deep_clone=True)

    def unbind(self) -> tuple[Self, Any]:
        """An unbound copy of this bound module, and its variables."""
        _module_checks(self)
        if self.scope is None:
            raise errors.CallUnbindOnUnboundModuleError()
        variables = self.variables
        module = self.clone(_deep_clone=True, _reset_names=True, name=None)
        return module, variables

    def module_paths(
        self,
        rngs: Any,
        *args: Any,
        show_repeated: bool = False,
        mutable: Any = _NO_INTERMEDIATES,
        **kwargs: Any,
    ) -> dict[str, ModuleBase]:
        """``{'/'-joined path: unbound copy}`` of every module whose method runs during
        ``init`` (the root's path is ``''``), found by tracing ``init`` abstractly."""
        found: dict[str, ModuleBase] = {}

        def record(next_fun: Any, a: Any, k: Any, context: Any) -> Any:
            module = context.module
            if context.method_name != "setup" and module.scope is not None:
                key = "/".join(module.scope.path)
                if show_repeated or key not in found:
                    found[key] = module.clone(parent=None)
            return next_fun(*a, **k)

        with intercept_methods(record):
            # Traced abstractly: no computation runs, no memory is allocated.
            jax.eval_shape(lambda: self.init(rngs, *args, mutable=mutable, **kwargs))
        return found

    def tabulate(self, rngs: Any, *args: Any, **kwargs: Any) -> str:
        """A table of this module's submodules, inputs, outputs and variables
        (``adapters.linen.summary.tabulate``)."""
        return _summary.tabulate(self, rngs, **_split_tabulate_kwargs(kwargs))(*args, **kwargs)


_TABULATE_OPTIONS = (
    "depth",
    "show_repeated",
    "mutable",
    "console_kwargs",
    "table_kwargs",
    "column_kwargs",
    "compute_flops",
    "compute_vjp_flops",
)


def _split_tabulate_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs.pop(k) for k in list(kwargs) if k in _TABULATE_OPTIONS}


FrozenVariableDict = FrozenDict
