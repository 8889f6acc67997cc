"""Functional state updates: ``apply(model, ..., mutable=...)`` and ``Variable.set``.

A model is never mutated. A layer that updates state (BatchNorm's running statistics, an
attention cache, a recorded intermediate) calls ``variable.set(new_value)``; the write is
recorded by the innermost active ``apply`` call, which returns the output together with a
new model in which the written variables hold their new values. ``apply`` names the
collections that may change (Linen's ``mutable=``): reading any collection is fine,
writing one that is not mutable is a ``StateWriteError`` naming the collection and path.

Writes are recorded per Variable object, so a Variable shared by several places of the
model (tied weights) is updated everywhere at once. ``variable.get()`` returns the value
written in the current ``apply`` call if there is one, ``variable.value`` otherwise.

Inside a transform (``jit``, ``vmap``, ``scan``...) the model is rebuilt from its arrays,
so the variables there are new objects: call ``apply`` inside the transformed function and
return the updated module from it (that is how the update leaves the transform).
"""

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

import jax.tree_util as jtu

from ._errors import require_callable
from ._filters import FilterLike, check_collections, to_filter
from ._module import Module
from ._partition import _collections, _Hole, _split
from ._tree import Path
from ._variables import Variable, WriteRecorder, recorders

T = TypeVar("T")
M = TypeVar("M")
_T_co = TypeVar("_T_co", covariant=True)
_M_co = TypeVar("_M_co", covariant=True)


class _CallableModule(Protocol[_T_co, _M_co]):
    """A Module whose ``__call__`` returns ``_T_co`` (``replace`` gives its own type)."""

    def __call__(self, *args: Any, **kwargs: Any) -> _T_co: ...
    def replace(self, **changes: Any) -> _M_co: ...


_IN_TRANSFORM = (
    "Inside a transform (jit, vmap, scan, ...) the model is rebuilt from its arrays: call "
    "pm.apply inside the transformed function and return the updated module from it. If "
    "the variable belongs to another module, apply that module."
)


def _not_a_module(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    given = "a lambda" if name == "<lambda>" else f"{name or type(fn).__name__!r}"
    return (
        f"pytreemod.apply was given {given}, which is not a Module or a method of one, so "
        "there is no model to update: pass the module itself, "
        "`pm.apply(module, *args, mutable=...)`, or one of its methods, "
        "`pm.apply(module.method, *args, mutable=...)`, not a lambda or function that calls it."
    )


def _recorder(fn: Any, model: Any, mutable: FilterLike) -> WriteRecorder:
    structure, values = _split(model)
    paths: dict[int, tuple[Path, Variable[Any]]] = {}
    for slot, value in enumerate(values):
        if isinstance(value, Variable) and id(value) not in paths:
            paths[id(value)] = (structure.paths[slot], value)
    elsewhere = _IN_TRANSFORM if isinstance(model, Module) else _not_a_module(fn)
    selected = to_filter(mutable)
    check_collections(selected, "apply(mutable=...)", lambda: _collections(structure))
    return WriteRecorder(paths, selected, elsewhere)


def is_mutable(variable: Variable[Any]) -> bool:
    """Whether ``variable.set(...)`` would be accepted now.

    True inside a ``pm.apply`` whose model holds ``variable`` (the innermost call) and whose
    ``mutable`` filter selects it; False outside ``pm.apply``. Code that can skip work
    when it may not write (a wrapped Linen module choosing its ``mutable`` collections,
    a layer deciding whether to update statistics) asks this instead of catching
    ``StateWriteError``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> class Stats(pm.Module):
    ...     mean: pm.BatchStat
    ...     def __call__(self):
    ...         return pm.is_mutable(self.mean)
    >>> model = Stats(pm.BatchStat(jnp.zeros(2)))
    >>> model(), pm.apply(model, mutable="batch_stats")[0], pm.apply(model)[0]
    (False, True, False)
    """
    active = recorders.get()
    if not active:
        return False
    entry = active[-1].paths.get(id(variable))
    return entry is not None and bool(active[-1].mutable(entry[0], entry[1]))


@overload
def apply(
    fn: _CallableModule[T, M], *args: Any, mutable: FilterLike = False, **kwargs: Any
) -> tuple[T, M]: ...
@overload
def apply(
    fn: Callable[..., T], *args: Any, mutable: FilterLike = False, **kwargs: Any
) -> tuple[T, Any]: ...
def apply(
    fn: Callable[..., T],
    *args: Any,
    mutable: FilterLike = False,
    **kwargs: Any,
) -> tuple[T, Any]:
    """Call a module (or a bound method) and return ``(output, updated_module)``.

    **Arguments:**

    - ``fn``: a Module (called as ``fn(*args, **kwargs)``) or a bound method of one
      (``model.encode``); the module is what gets updated.
    - ``*args``, ``**kwargs``: passed to the call.
    - ``mutable``: a filter of the collections the call may write (``"batch_stats"``,
      ``["batch_stats", "cache"]``, ``True`` for all); default nothing. A collection
      name no Variable class declares (a typo such as ``"batch_stat"``) is an
      ``InvalidFilterError``; a declared one the module lacks is allowed (nothing to write).

    **Returns:** the call's output and the module with every written variable replaced
    (the input module is unchanged). Typed ``tuple[output of __call__, type(fn)]`` for a
    module; for a bound method the module is typed ``Any``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> class Counter(pm.Module):
    ...     count: pm.BatchStat
    ...     def __call__(self, x):
    ...         self.count.set(self.count.value + 1)
    ...         return x
    >>> _, c = pm.apply(Counter(pm.BatchStat(jnp.array(0))), 1.0, mutable="batch_stats")
    >>> int(c.count.value)
    1
    """
    require_callable(fn, "apply")
    module = getattr(fn, "__self__", fn)
    recorder = _recorder(fn, module, mutable)
    token = recorders.set((*recorders.get(), recorder))
    try:
        out = fn(*args, **kwargs)
    finally:
        recorders.reset(token)
    if not recorder.writes:
        return out, module
    structure, values = _split(module)
    replaced: dict[int, Variable] = {}  # one new object per written variable (aliases too)
    for v in values:
        if isinstance(v, Variable) and id(v) in recorder.writes and id(v) not in replaced:
            replaced[id(v)] = type(v)(recorder.writes[id(v)])
    leaves = [
        replaced.get(id(values[x.index]), values[x.index]) if isinstance(x, _Hole) else x
        for x in structure.leaves
    ]
    return out, jtu.tree_unflatten(structure.treedef, leaves)
