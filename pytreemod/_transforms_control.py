"""``remat``/``checkpoint``, ``cond``, ``switch``, ``while_loop``, ``fori_loop``,
``eval_shape`` and ``checkify`` over modules.

Each packs its operands with ``_pack`` and checks that branches and loop bodies keep the
structure of the state (variables, static fields, metadata) they receive.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, TypeVarTuple, overload

import jax
from jax.experimental import checkify as jax_checkify

from ._errors import TransformError, require_callable
from ._pack import Skeleton, pack, unpack

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@overload
def remat(
    fun: Callable[P, R],
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
) -> Callable[P, R]: ...
@overload
def remat(
    fun: None = None,
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def remat(
    fun: Callable[..., Any] | None = None,
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
) -> Any:
    """``jax.checkpoint`` over modules: recompute ``fun``'s intermediates in the backward
    pass instead of storing them. ``policy`` is one of ``jax.checkpoint_policies``.

    ``static_argnums`` names positional arguments handed to ``fun`` as they are, arrays
    included (not traced, so ``fun`` may branch on them in Python), as in
    ``jax.checkpoint``; other non-array leaves are static anyway.
    """
    if fun is None:
        return functools.partial(
            remat, policy=policy, prevent_cse=prevent_cse, static_argnums=static_argnums
        )
    require_callable(fun, "remat (checkpoint)")
    fun_ = fun
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for i in static:
            if not -len(args) <= i < len(args):
                raise TransformError(
                    f"remat: static_argnums names argument {i} but the function got "
                    f"{len(args)} positional arguments."
                )
        fixed = {i % len(args): args[i] for i in static}
        traced = tuple(a for i, a in enumerate(args) if i not in fixed)
        skel, arrays, _ = pack((traced, kwargs))
        cell: dict[str, Skeleton] = {}

        def inner(arrays: list[Any]) -> list[Any]:
            a, k = unpack(skel, arrays)
            it = iter(a)
            full = [fixed[i] if i in fixed else next(it) for i in range(len(args))]
            oskel, oarrays, _ = pack(fun_(*full, **k))
            cell["out"] = oskel
            return oarrays

        out = jax.checkpoint(inner, policy=policy, prevent_cse=prevent_cse)(arrays)
        return unpack(cell["out"], out)

    return wrapper


checkpoint = remat


def _branches(
    name: str, branches: Sequence[Callable[..., Any]], operands: tuple[Any, ...]
) -> tuple[list[Callable[[list[Any]], list[Any]]], list[Any], list[tuple[int, Skeleton]]]:
    skel, arrays, _ = pack(operands)
    outs: list[tuple[int, Skeleton]] = []  # (branch index, output skeleton), in trace order

    def make(i: int, f: Callable[..., Any]) -> Callable[[list[Any]], list[Any]]:
        def inner(arrays: list[Any]) -> list[Any]:
            oskel, oarrays, _ = pack(f(*unpack(skel, arrays)))
            # Checked here, as each branch is traced: JAX compares the branches' array
            # lists only after tracing them all, with a less helpful error.
            if outs and oskel != outs[0][1]:
                j, first = outs[0]
                raise TransformError(
                    f"{name}: branch {i} returns {oskel.structure.treedef} but branch {j} "
                    f"returns {first.structure.treedef}; every branch must return the same "
                    "variables, static fields and structure (create and update the same "
                    "state in each)."
                )
            outs.append((i, oskel))
            return oarrays

        return inner

    return [make(i, f) for i, f in enumerate(branches)], arrays, outs


def _same_outputs(name: str, outs: list[tuple[int, Skeleton]]) -> Skeleton:
    """The output skeleton every branch returned (the branches checked it while tracing)."""
    return outs[0][1]


def cond(
    pred: Any, true_fun: Callable[[*Ts], R], false_fun: Callable[[*Ts], R], *operands: *Ts
) -> R:
    """``jax.lax.cond`` over modules: both branches must return the same structure."""
    fns, arrays, outs = _branches("cond", [true_fun, false_fun], operands)
    out = jax.lax.cond(pred, fns[0], fns[1], arrays)
    return unpack(_same_outputs("cond", outs), out)


def switch(index: Any, branches: Sequence[Callable[[*Ts], R]], *operands: *Ts) -> R:
    """``jax.lax.switch`` over modules: every branch must return the same structure."""
    fns, arrays, outs = _branches("switch", list(branches), operands)
    out = jax.lax.switch(index, fns, arrays)
    return unpack(_same_outputs("switch", outs), out)


def _loop_body(
    name: str, skel: Skeleton, step: Callable[[T], T]
) -> Callable[[list[Any]], list[Any]]:
    """``step`` as a function of the loop state's arrays; the state keeps its structure."""

    def body(arrays: list[Any]) -> list[Any]:
        new_skel, new_arrays, _ = pack(step(unpack(skel, arrays)))
        if new_skel != skel:
            raise TransformError(
                f"{name}: body_fun returned a loop state whose structure differs from "
                f"init_val ({new_skel.structure.treedef} vs {skel.structure.treedef}); "
                "keep the same variables and static fields, and create none in the body."
            )
        return new_arrays

    return body


def while_loop(cond_fun: Callable[[T], Any], body_fun: Callable[[T], T], init_val: T) -> T:
    """``jax.lax.while_loop`` over modules; the loop state keeps its structure."""
    skel, arrays, _ = pack(init_val)

    def c(arrays: list[Any]) -> Any:
        return cond_fun(unpack(skel, arrays))

    b = _loop_body("while_loop", skel, body_fun)
    return unpack(skel, jax.lax.while_loop(c, b, arrays))


def fori_loop(
    lower: Any,
    upper: Any,
    body_fun: Callable[[Any, T], T],
    init_val: T,
    *,
    unroll: int | bool | None = None,
) -> T:
    """``jax.lax.fori_loop`` over modules: ``body_fun(i, val)`` for ``i`` in
    ``range(lower, upper)``; the loop state keeps its structure, as in ``while_loop``.
    ``unroll`` is ``jax.lax.fori_loop``'s (static bounds lower it to a ``scan``)."""
    skel, arrays, _ = pack(init_val)

    def b(i: Any, arrays: list[Any]) -> list[Any]:
        return _loop_body("fori_loop", skel, functools.partial(body_fun, i))(arrays)

    return unpack(skel, jax.lax.fori_loop(lower, upper, b, arrays, unroll=unroll))


def eval_shape(fun: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``jax.eval_shape`` over modules: arrays in the output become ``ShapeDtypeStruct``s,
    everything else is returned as is. Useful to build a model without allocating it.

    Typed as ``fun``'s return type (a model skeleton is typed as the model), though its
    arrays are ``ShapeDtypeStruct``s."""
    require_callable(fun, "eval_shape")
    skel, arrays, _ = pack((args, kwargs))
    cell: dict[str, Skeleton] = {}
    shapes = jax.eval_shape(_on_arrays(fun, skel, cell), arrays)
    return unpack(cell["out"], shapes)


def _on_arrays(
    fun: Callable[..., Any], skel: Skeleton, cell: dict[str, Skeleton]
) -> Callable[[list[Any]], list[Any]]:
    """``fun`` as a function of the arrays of its packed ``(args, kwargs)`` (``skel``):
    it returns its output's arrays and keeps the output's skeleton in ``cell["out"]``."""

    def inner(arrays: list[Any]) -> list[Any]:
        a, k = unpack(skel, arrays)
        oskel, oarrays, _ = pack(fun(*a, **k))
        cell["out"] = oskel
        return oarrays

    return inner


def checkify(fun: Callable[..., Any] | None = None, *, errors: frozenset[Any] | None = None) -> Any:
    """``jax.experimental.checkify.checkify`` over modules: the wrapped function returns
    ``(error, out)``; ``error.throw()`` raises the first failed check. ``errors`` is a set
    of checkify's error classes (``checkify.user_checks``, the default, or e.g.
    ``checkify.float_checks``).

    Works under ``pm.jit``: the checks are part of the computation and ``error`` one of
    its outputs, thrown after the step.
    """
    if fun is None:
        return functools.partial(checkify, errors=errors)
    require_callable(fun, "checkify")
    selected = jax_checkify.user_checks if errors is None else errors
    fun_ = fun

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        skel, arrays, _ = pack((args, kwargs))
        cell: dict[str, Skeleton] = {}
        inner = _on_arrays(fun_, skel, cell)
        error, out = jax_checkify.checkify(inner, errors=selected)(arrays)
        return error, unpack(cell["out"], out)

    return wrapper
