"""Thread-local dynamic state of Linen modules: the module stack, intermediate capture,
method interceptors and named-call profiling.

Every piece of state here is per thread (``threading.local``), so two threads tracing
Linen code never see each other's modules.
"""

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ... import config
from ._marker import ModuleBase
from ._values import _represent_tree


class _ParentSentinel:
    """The default ``parent``: "the module whose method is running" (or none at top level).

    A single instance exists; copying or pickling it gives it back.
    """

    __slots__ = ()

    def __copy__(self) -> "_ParentSentinel":
        return self

    def __deepcopy__(self, memo: Any) -> "_ParentSentinel":
        return self

    def __reduce__(self) -> tuple[Callable[[], "_ParentSentinel"], tuple[()]]:
        return (_get_unspecified_parent, ())

    def __repr__(self) -> str:
        return "_unspecified_parent"


_unspecified_parent = _ParentSentinel()


def _get_unspecified_parent() -> _ParentSentinel:
    return _unspecified_parent


class _DynamicContext(threading.local):
    """Per-thread stacks: modules whose methods run, capture filters, call records."""

    def __init__(self) -> None:
        self.module_stack: list[ModuleBase | None] = [None]
        self.capture_stack: list[Any] = []
        self.call_info_stack: list[Any] = []


_context = _DynamicContext()


# ----------------------------------------------------------------------------- call records


@dataclasses.dataclass
class _CallInfo:
    """One recorded method call (for ``tabulate``): its order, the module's path, an
    unbound copy of the module, the scope's rngs and mutability, and the call's inputs
    and outputs (as ``_values._represent_tree`` shows them)."""

    index: int
    path: tuple[str, ...]
    module: Any
    rngs: Any
    mutable: Any
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: Any


@dataclasses.dataclass
class _CallInfoContext:
    """The calls recorded while a ``_tabulate_context`` is active."""

    index: int
    calls: list[_CallInfo]

    def get_call_index(self) -> int:
        index = self.index
        self.index += 1
        return index

    def record(
        self, index: int, module: Any, method: str, args: Any, kwargs: Any, outputs: Any
    ) -> None:
        args, kwargs, outputs = _represent_tree((args, kwargs, outputs))
        scope = module.scope
        self.calls.append(
            _CallInfo(
                index,
                scope.path,
                module.clone(),
                scope.rngs,
                scope.mutable,
                method,
                args,
                kwargs,
                outputs,
            )
        )


@contextlib.contextmanager
def _tabulate_context() -> Iterator[None]:
    """Record every wrapped method call made inside the block (see ``_CallInfo``)."""
    _context.call_info_stack.append(_CallInfoContext(0, []))
    try:
        yield
    finally:
        _context.call_info_stack.pop()


# ----------------------------------------------------------------------------- interceptors


@dataclasses.dataclass(frozen=True)
class InterceptorContext:
    """What an interceptor learns about the intercepted call.

    - ``module``: the module whose method is called.
    - ``method_name``: the method's name.
    - ``orig_method``: the method bound to ``module``, without interceptors.
    """

    module: ModuleBase
    method_name: str
    orig_method: Callable[..., Any]


class ThreadLocalStack(threading.local):
    """A per-thread stack; iterating goes from the top (last pushed) down."""

    def __init__(self) -> None:
        self._storage: list[Any] = []

    def push(self, elem: Any) -> None:
        self._storage.append(elem)

    def pop(self) -> Any:
        return self._storage.pop()

    def __iter__(self) -> Iterator[Any]:
        return iter(reversed(self._storage))

    def __len__(self) -> int:
        return len(self._storage)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._storage})"


Interceptor = Callable[
    [Callable[..., Any], tuple[Any, ...], dict[str, Any], InterceptorContext], Any
]
_global_interceptor_stack = ThreadLocalStack()


@contextlib.contextmanager
def intercept_methods(interceptor: Interceptor) -> Iterator[None]:
    """Run ``interceptor(next_fun, args, kwargs, context)`` around every wrapped module
    method called inside the ``with`` block.

    The interceptor decides whether (and with which arguments) to call ``next_fun``;
    nested ``intercept_methods`` blocks run innermost first (last in, first out).
    """
    _global_interceptor_stack.push(interceptor)
    try:
        yield
    finally:
        popped = _global_interceptor_stack.pop()
        assert popped is interceptor


def run_interceptors(
    orig_method: Callable[..., Any], module: ModuleBase, *args: Any, **kwargs: Any
) -> Any:
    """Call ``orig_method(module, *args, **kwargs)`` through the active interceptors."""
    method_name = getattr(orig_method, "__name__", "<unnamed>")
    fun: Callable[..., Any] = functools.partial(orig_method, module)
    context = InterceptorContext(module, method_name, fun)
    # The stack iterates from the most recent interceptor down; wrapping in that order
    # leaves the oldest interceptor outermost, so the newest runs closest to the method.
    for interceptor in _global_interceptor_stack:
        fun = _bind_interceptor(interceptor, fun, context)
    return fun(*args, **kwargs)


def _bind_interceptor(
    interceptor: Interceptor, fun: Callable[..., Any], context: InterceptorContext
) -> Callable[..., Any]:
    def intercepted(*args: Any, **kwargs: Any) -> Any:
        return interceptor(fun, args, kwargs, context)

    return intercepted


# ----------------------------------------------------------------------------- named calls


class _NamedCallState:
    """Process-wide switch (as in Flax); ``None`` follows ``config.flax_profile``."""

    def __init__(self) -> None:
        self.enabled: bool | None = None


_named_call = _NamedCallState()


def _config_flag(name: str, default: bool = False) -> bool:
    """The value of ``adapters.config.<name>`` (``default`` if there is no such flag)."""
    return bool(getattr(config, name, default))


def _named_call_enabled() -> bool:
    enabled = _named_call.enabled
    if enabled is not None:
        return enabled
    return _config_flag("flax_profile", True)


def enable_named_call() -> None:
    """Wrap every module method call in ``jax.named_scope`` (visible in profiles)."""
    _named_call.enabled = True


def disable_named_call() -> None:
    """Stop wrapping module method calls in ``jax.named_scope``."""
    _named_call.enabled = False


@contextlib.contextmanager
def override_named_call(enable: bool = True) -> Iterator[None]:
    """Within the ``with`` block, named calls are ``enable``d (or not)."""
    previous = _named_call.enabled
    _named_call.enabled = enable
    try:
        yield
    finally:
        _named_call.enabled = previous


def _derive_profiling_name(module: Any, fn: Callable[..., Any]) -> str:
    fn_name = getattr(fn, "__name__", "fn")
    method_suffix = "" if fn_name == "__call__" else f".{fn_name}"
    module_name = module.name or type(module).__name__
    return f"{module_name}{method_suffix}"
