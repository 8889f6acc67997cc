"""Defaults of new Variables: ``var_defaults(hijax=, ref=)`` and ``use_eager_sharding``."""

import dataclasses
import functools
import threading
import typing as tp
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from adapters.config import config

F = tp.TypeVar("F", bound=Callable[..., Any])

# --------------------------------------------------------------------------------------
# Defaults of new Variables: var_defaults(hijax=, ref=) and use_eager_sharding
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class VariableContext(threading.local):
    """Per thread: the stacks of the defaults set by ``var_defaults``/``use_eager_sharding``."""

    variable_hijax_stack: list[bool] = dataclasses.field(default_factory=list)
    variable_ref_stack: list[bool] = dataclasses.field(default_factory=list)
    eager_shard_stack: list[bool] = dataclasses.field(default_factory=list)


VARIABLE_CONTEXT = VariableContext()


class _StackSetting:
    """A setting kept on a stack: ``setting(v)`` sets it at once (replacing the top);
    used as a context manager it restores the previous value on exit; used as a decorator
    it undoes the change and applies ``v`` only while the decorated function runs."""

    def __init__(self, stack: list[bool], value: bool) -> None:
        self._stack = stack
        self._new = value
        self._prev: bool | None = stack[-1] if stack else None
        if stack:
            stack[-1] = value
        else:
            stack.append(value)

    def __enter__(self) -> None:
        if self._prev is not None:
            self._stack.insert(-1, self._prev)

    def __exit__(self, *exc: object) -> None:
        self._stack.pop()

    def __call__(self, f: F) -> F:
        self._stack.pop()
        if self._prev is not None:
            self._stack.append(self._prev)

        @functools.wraps(f)
        def with_setting(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(self._new)
            try:
                return f(*args, **kwargs)
            finally:
                self._stack.pop()

        return tp.cast(F, with_setting)


class use_eager_sharding(_StackSetting):
    """Whether new Variables with ``out_sharding`` metadata are sharded when created.

    ``nnx.use_eager_sharding(False)`` changes the default at once; ``with
    nnx.use_eager_sharding(True): ...`` changes it for a block; as a decorator, for the
    calls of one function. The global default is ``config.flax_always_shard_variable``.
    """

    def __init__(self, value: bool, /) -> None:
        super().__init__(VARIABLE_CONTEXT.eager_shard_stack, value)

    @classmethod
    def current_value(cls) -> bool:
        """The setting in force now."""
        stack = VARIABLE_CONTEXT.eager_shard_stack
        return stack[-1] if stack else bool(config.flax_always_shard_variable)


def using_eager_sharding() -> bool:
    """Whether new Variables are sharded eagerly by default (see ``use_eager_sharding``)."""
    return use_eager_sharding.current_value()


@dataclasses.dataclass(frozen=True)
class VarDefaults(Mapping[str, Any]):
    """The defaults of new Variables in force now (``nnx.var_defaults()``)."""

    hijax: bool
    ref: bool

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in dataclasses.fields(self))

    def __len__(self) -> int:
        return len(dataclasses.fields(self))


class VarDefaultsContext:
    """What ``var_defaults(hijax=..., ref=...)`` returns: the change is already made; as a
    context manager it is undone on exit, as a decorator it applies only inside the call."""

    def __init__(self, settings: list[_StackSetting]) -> None:
        self._settings = settings

    def __enter__(self) -> None:
        for s in self._settings:
            s.__enter__()

    def __exit__(self, *exc: object) -> None:
        for s in reversed(self._settings):
            s.__exit__(*exc)

    def __call__(self, f: F) -> F:
        for s in reversed(self._settings):
            f = s(f)
        return f


def _current_defaults() -> VarDefaults:
    hijax_stack = VARIABLE_CONTEXT.variable_hijax_stack
    ref_stack = VARIABLE_CONTEXT.variable_ref_stack
    return VarDefaults(
        hijax=hijax_stack[-1] if hijax_stack else bool(config.flax_hijax_variable),
        ref=ref_stack[-1] if ref_stack else False,
    )


@tp.overload
def var_defaults() -> VarDefaults: ...


@tp.overload
def var_defaults(*, hijax: bool, ref: bool | None = None) -> VarDefaultsContext: ...


@tp.overload
def var_defaults(*, hijax: bool | None = None, ref: bool) -> VarDefaultsContext: ...


def var_defaults(
    *, hijax: bool | None = None, ref: bool | None = None
) -> VarDefaults | VarDefaultsContext:
    """With no argument, the defaults of new Variables (``var_defaults().hijax``); with
    ``hijax=``/``ref=``, set them (at once, for a ``with`` block, or for a decorated
    function)."""
    ctx = VARIABLE_CONTEXT
    if hijax is None and ref is None:
        return _current_defaults()
    settings = []
    if hijax is not None:
        settings.append(_StackSetting(ctx.variable_hijax_stack, hijax))
    if ref is not None:
        settings.append(_StackSetting(ctx.variable_ref_stack, ref))
    return VarDefaultsContext(settings)
