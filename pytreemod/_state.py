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

import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

import jax.tree_util as jtu

from ._errors import StateWriteError
from ._filters import FilterLike, to_filter
from ._partition import _Hole, _split
from ._tree import Path, format_path
from ._variables import Variable

T = TypeVar("T")


class _Recorder:
    __slots__ = ("mutable", "paths", "writes")

    def __init__(self, model: Any, mutable: FilterLike):
        structure, values = _split(model)
        self.paths: dict[int, tuple[Path, Variable]] = {}
        for slot, value in enumerate(values):
            if isinstance(value, Variable) and id(value) not in self.paths:
                self.paths[id(value)] = (structure.paths[slot], value)
        self.mutable = to_filter(mutable)
        self.writes: dict[int, Any] = {}


_active: contextvars.ContextVar[tuple[_Recorder, ...]] = contextvars.ContextVar(
    "pytreemod_apply", default=()
)


def _set(variable: Variable, value: Any) -> None:
    recorders = _active.get()
    name = f"{type(variable).__name__} (collection {variable.collection!r})"
    if not recorders:
        raise StateWriteError(
            f"{name}.set() was called outside pytreemod.apply. Modules are immutable: run "
            f"the call as `out, model = pm.apply(model, *args, mutable={variable.collection!r})` "
            "to get the updated model back."
        )
    recorder = recorders[-1]
    entry = recorder.paths.get(id(variable))
    if entry is None:
        raise StateWriteError(
            f"{name}.set() wrote a variable that is not part of the model given to the "
            "innermost pytreemod.apply. Inside a transform (jit, vmap, scan, ...) the model "
            "is rebuilt from its arrays: call pm.apply inside the transformed function and "
            "return the updated module from it."
        )
    path, original = entry
    if not recorder.mutable(path, original):
        raise StateWriteError(
            f"Cannot update {format_path(path)}: collection {variable.collection!r} is not "
            f"mutable in this apply (mutable={recorder.mutable!r}). Pass "
            f"mutable=[{variable.collection!r}, ...] to pytreemod.apply to allow it, or do not "
            "write it (e.g. BatchNorm with use_running_average=True in evaluation)."
        )
    recorder.writes[id(variable)] = value


def _get(variable: Variable) -> Any:
    for recorder in reversed(_active.get()):
        if id(variable) in recorder.writes:
            return recorder.writes[id(variable)]
    return variable.value


def is_mutable(variable: Variable) -> bool:
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
    recorders = _active.get()
    if not recorders:
        return False
    entry = recorders[-1].paths.get(id(variable))
    return entry is not None and bool(recorders[-1].mutable(entry[0], entry[1]))


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
      ``["batch_stats", "cache"]``, ``True`` for all); default nothing.

    **Returns:** the call's output and the module with every written variable replaced
    (the input module is unchanged).

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
    module = getattr(fn, "__self__", fn)
    recorder = _Recorder(module, mutable)
    token = _active.set((*_active.get(), recorder))
    try:
        out = fn(*args, **kwargs)
    finally:
        _active.reset(token)
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


Variable.set = _set  # type: ignore[method-assign]
Variable.get = _get  # type: ignore[method-assign]
