"""``grad``, ``value_and_grad``, ``vjp``, ``jvp`` and ``custom_vjp`` over modules;
``DiffState`` in ``argnums`` selects the state to differentiate."""

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)

import jax
import jax.numpy as jnp
from jax.custom_derivatives import CustomVJPPrimal

from ._errors import TransformError, require_callable
from ._filters import Filter, FilterLike, check_collections, to_filter
from ._meta import slot_value
from ._pack import Skeleton, pack, unpack
from ._partition import State, _Hole, partition
from ._tree import is_array, is_inexact_array

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A")


@dataclasses.dataclass(frozen=True)
class DiffState:
    """Differentiate argument ``argnum`` only in the state ``filter`` selects.

    Used in ``grad``/``value_and_grad``'s ``argnums``; the gradient for this entry is a
    nested dict shaped like ``pytreemod.state(arg, filter)``.
    """

    argnum: int
    filter: FilterLike = True


_Argnums = int | DiffState | Sequence[int | DiffState]

_R_co = TypeVar("_R_co", covariant=True)
_A_co = TypeVar("_A_co", covariant=True)


class _GradFn(Protocol[P]):
    """``pm.grad(fun)``: the gradient has the type of the first argument."""

    def __call__(self, x: T, /, *args: P.args, **kwargs: P.kwargs) -> T: ...


class _GradAuxFn(Protocol[P, _A_co]):
    """``pm.grad(fun, has_aux=True)``: ``(gradient, aux)``."""

    def __call__(self, x: T, /, *args: P.args, **kwargs: P.kwargs) -> tuple[T, _A_co]: ...


class _ValueAndGradFn(Protocol[P, _R_co]):
    """``pm.value_and_grad(fun)``: ``(fun's value, gradient of the first argument)``."""

    def __call__(self, x: T, /, *args: P.args, **kwargs: P.kwargs) -> tuple[_R_co, T]: ...


# The overloads type the result after ``argnums``: the first argument's own type (argnums
# 0, the default; bound when the wrapper is called, so ``pm.grad(lambda m: ...)(model)``
# is typed like ``model``), a ``State`` (a ``DiffState``) or ``Any`` (anything else).
@overload
def value_and_grad(
    fun: Callable[Concatenate[Any, P], R],
    *,
    argnums: Literal[0] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> "_ValueAndGradFn[P, R]": ...
@overload
def value_and_grad(
    fun: Callable[P, R],
    *,
    argnums: DiffState,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[P, tuple[R, State]]: ...
@overload
def value_and_grad(
    fun: Callable[P, R],
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[P, tuple[R, Any]]: ...
# (The decorator forms below "overlap" the general one only in how pyright compares
# generic callables; the first matching overload is the one that applies.)
@overload
def value_and_grad(  # pyright: ignore[reportOverlappingOverload]
    fun: None = None,
    *,
    argnums: Literal[0] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[Concatenate[Any, P], R]], "_ValueAndGradFn[P, R]"]: ...
@overload
def value_and_grad(
    fun: None = None,
    *,
    argnums: DiffState,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, tuple[R, State]]]: ...
@overload
def value_and_grad(
    fun: None = None,
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, tuple[R, Any]]]: ...
def value_and_grad(
    fun: Callable[..., Any] | None = None,
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Any:
    """``jax.value_and_grad`` over modules. See ``grad`` for ``argnums``,
    ``holomorphic`` and ``allow_int``.

    Returns ``(value, grads)`` where ``value`` is what ``fun`` returns (``(loss, aux)``
    with ``has_aux``); the types follow ``fun``'s as for ``grad``.
    """
    if fun is None:
        return functools.partial(
            value_and_grad,
            argnums=argnums,
            has_aux=has_aux,
            holomorphic=holomorphic,
            allow_int=allow_int,
        )
    require_callable(fun, "value_and_grad")
    single = not isinstance(argnums, (tuple, list))
    specs = [argnums] if single else list(cast(Sequence[Any], argnums))
    norm: list[tuple[int, Filter, bool]] = []
    for s in specs:
        if isinstance(s, DiffState):
            norm.append((s.argnum, to_filter(s.filter), True))
        elif isinstance(s, int) and not isinstance(s, bool):
            norm.append((s, to_filter(True), False))
        else:
            raise TransformError(
                f"grad: argnums entries must be ints or DiffState(argnum, filter), got {s!r}."
            )
    fun_ = fun
    checked: list[bool] = []

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for argnum, _, _ in norm:
            if not -len(args) <= argnum < len(args):
                raise TransformError(
                    f"grad: argnums refers to argument {argnum} but the function got "
                    f"{len(args)} positional arguments."
                )
        skel, arrays, slot_values = pack(args)
        value_of = dict(zip(skel.slots, slot_values))
        if not checked:  # on the first call: Variable classes are all defined by then
            for _, filt, as_state in norm:
                if as_state:
                    check_collections(filt, "grad: DiffState")
            checked.append(True)
        chosen: list[tuple[int, int]] = []  # (array index, spec index)
        for i, slot in enumerate(skel.array_slots()):
            path = skel.path(slot)
            for k, (argnum, filt, _) in enumerate(norm):
                if (
                    path[0] == argnum % len(args)
                    and filt(path[1:], value_of[slot])
                    and (is_inexact_array(arrays[i]) or (allow_int and is_array(arrays[i])))
                ):
                    chosen.append((i, k))
                    break

        def f(diff: list[Any]) -> Any:
            full = list(arrays)
            for (i, _), x in zip(chosen, diff):
                full[i] = x
            return fun_(*unpack(skel, full), **kwargs)

        value, grads = jax.value_and_grad(
            f, has_aux=has_aux, holomorphic=holomorphic, allow_int=allow_int
        )([arrays[i] for i, _ in chosen])
        results = []
        for k, (argnum, filt, as_state) in enumerate(norm):
            full: list[Any] = [None] * len(arrays)
            for (i, kk), g in zip(chosen, grads):
                if kk == k:
                    full[i] = g
            grad_arg = unpack(skel, full)[argnum]
            if as_state:
                # Select by the argument's own variables, not by their gradients (a filter
                # on values would see None for what was not differentiated).
                a = argnum % len(args)
                keep = {
                    skel.path(s)[1:]
                    for s in skel.slots
                    if skel.path(s)[0] == a and filt(skel.path(s)[1:], value_of[s])
                }
                grad_arg = partition((grad_arg,), lambda p, v, keep=keep: p[1:] in keep)[1]
                grad_arg = grad_arg.get(0, {})
            results.append(grad_arg)
        return value, (results[0] if single else tuple(results))

    return wrapper


@overload
def grad(
    fun: Callable[Concatenate[Any, P], Any],
    *,
    argnums: Literal[0] = 0,
    has_aux: Literal[False] = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> "_GradFn[P]": ...
@overload
def grad(
    fun: Callable[Concatenate[Any, P], tuple[Any, A]],
    *,
    argnums: Literal[0] = 0,
    has_aux: Literal[True],
    holomorphic: bool = False,
    allow_int: bool = False,
) -> "_GradAuxFn[P, A]": ...
@overload
def grad(
    fun: Callable[P, Any],
    *,
    argnums: DiffState,
    has_aux: Literal[False] = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[P, State]: ...
@overload
def grad(
    fun: Callable[P, tuple[Any, A]],
    *,
    argnums: DiffState,
    has_aux: Literal[True],
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[P, tuple[State, A]]: ...
@overload
def grad(
    fun: Callable[P, Any],
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[P, Any]: ...
@overload
def grad(  # pyright: ignore[reportOverlappingOverload]
    fun: None = None,
    *,
    argnums: Literal[0] = 0,
    has_aux: Literal[False] = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[Concatenate[Any, P], Any]], "_GradFn[P]"]: ...
@overload
def grad(
    fun: None = None,
    *,
    argnums: Literal[0] = 0,
    has_aux: Literal[True],
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[Concatenate[Any, P], tuple[Any, A]]], "_GradAuxFn[P, A]"]: ...
@overload
def grad(
    fun: None = None,
    *,
    argnums: DiffState,
    has_aux: Literal[False] = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[P, Any]], Callable[P, State]]: ...
@overload
def grad(
    fun: None = None,
    *,
    argnums: DiffState,
    has_aux: Literal[True],
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[P, tuple[Any, A]]], Callable[P, tuple[State, A]]]: ...
@overload
def grad(
    fun: None = None,
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[[Callable[P, Any]], Callable[P, Any]]: ...
def grad(
    fun: Callable[..., Any] | None = None,
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Any:
    """``jax.grad`` over modules.

    **Arguments:**

    - ``fun``: scalar-valued function (or use as ``@pm.grad(argnums=...)``).
    - ``argnums``: an int (gradient shaped like the argument: a module of the same type
      holding gradients, ``None`` where a value is not differentiable), a
      ``DiffState(argnum, filter)`` (gradient of the selected state, as a nested dict like
      ``pytreemod.state(arg, filter)``), or a tuple of these (a tuple of gradients).
    - ``has_aux``: ``fun`` returns ``(value, aux)``; then ``(grads, aux)`` is returned.
    - ``holomorphic``: ``fun`` is holomorphic in complex inputs (``jax.grad``'s option).
    - ``allow_int``: integer arrays of the differentiated arguments are differentiated
      too, with ``float0`` gradients (``jax.grad``'s option); without it they are not
      differentiated and their gradient is ``None``.

    Only floating-point arrays are differentiated. A Variable shared by several places
    (tied weights) gets one gradient, the sum over its uses. If the places are in
    different arguments, the variable belongs to the first argument that holds it: its
    whole gradient is reported there (and ``None`` at the later argument's place).

    Typing: with the default ``argnums=0`` the gradient has the type of ``fun``'s first
    parameter (``pm.grad(loss)(model, x)`` is typed like ``model``); with a ``DiffState``
    it is a ``State``; the wrapper keeps ``fun``'s parameters.
    """
    if fun is None:
        return functools.partial(
            grad, argnums=argnums, has_aux=has_aux, holomorphic=holomorphic, allow_int=allow_int
        )
    require_callable(fun, "grad")
    vg = value_and_grad(
        fun, argnums=argnums, has_aux=has_aux, holomorphic=holomorphic, allow_int=allow_int
    )

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


def vjp(fun: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """``jax.vjp`` over modules: ``(out, vjp_fn)``, or ``(out, vjp_fn, aux)`` with
    ``has_aux`` (``fun`` then returns ``(out, aux)``).

    ``vjp_fn(cotangent)`` takes a cotangent shaped like ``out`` (a module of the same type
    holding cotangents for a module) and returns a tuple with one cotangent per primal,
    shaped like it. Every array is differentiated, as in ``jax.vjp`` (an integer array's
    cotangent is ``float0``); non-array leaves are static and come back as they are.
    """
    require_callable(fun, "vjp")
    skel, arrays, _ = pack(primals)
    cell: dict[str, Any] = {}
    f = _linearised("vjp", fun, skel, has_aux, cell)
    if has_aux:
        out_arrays, pullback, aux = jax.vjp(f, arrays, has_aux=True)
    else:
        (out_arrays, pullback), aux = jax.vjp(f, arrays), None
    oskel = cell["out"]

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        cskel, carrays, _ = pack(cotangent)
        if cskel != oskel:
            raise TransformError(
                f"vjp: the cotangent has the structure {cskel.structure.treedef} but the "
                f"output has {oskel.structure.treedef}; pass a cotangent shaped like the "
                "output (the same modules, variables and static fields)."
            )
        (grads,) = pullback(carrays)
        return unpack(skel, grads)

    out = unpack(oskel, out_arrays)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def jvp(
    fun: Callable[..., Any],
    primals: Sequence[Any],
    tangents: Sequence[Any],
    *,
    has_aux: bool = False,
) -> Any:
    """``jax.jvp`` over modules: ``(out, tangent_out)``, or ``(out, tangent_out, aux)``
    with ``has_aux``. ``tangents`` has the structure of ``primals`` (a module of the same
    type holding tangents for a module); ``tangent_out`` has the structure of ``out``."""
    require_callable(fun, "jvp")
    pskel, parrays, _ = pack(tuple(primals))
    tskel, tarrays, _ = pack(tuple(tangents))
    if pskel != tskel:
        raise TransformError(
            f"jvp: the tangents have the structure {tskel.structure.treedef} but the primals "
            f"have {pskel.structure.treedef}; pass tangents shaped like the primals (the "
            "same modules, variables and static fields)."
        )
    cell: dict[str, Any] = {}
    f = _linearised("jvp", fun, pskel, has_aux, cell)
    if has_aux:
        out_arrays, tangent_arrays, aux = jax.jvp(f, (parrays,), (tarrays,), has_aux=True)
    else:
        (out_arrays, tangent_arrays), aux = jax.jvp(f, (parrays,), (tarrays,)), None
    oskel = cell["out"]
    out, tangent_out = unpack(oskel, out_arrays), unpack(oskel, tangent_arrays)
    return (out, tangent_out, aux) if has_aux else (out, tangent_out)


def _linearised(
    name: str, fun: Callable[..., Any], skel: Skeleton, has_aux: bool, cell: dict[str, Any]
) -> Callable[[list[Any]], Any]:
    """``fun`` of the primals' arrays (``skel``), as ``vjp``/``jvp`` differentiate it: its
    output's arrays (with ``aux`` beside them for ``has_aux``); the output's skeleton is
    kept in ``cell["out"]``."""

    def f(arrays: list[Any]) -> Any:
        out = fun(*unpack(skel, arrays))
        aux = None
        if has_aux:
            out, aux = _out_and_aux(name, out)
        oskel, oarrays, _ = pack(out)
        cell["out"] = oskel
        return (oarrays, aux) if has_aux else oarrays

    return f


def _out_and_aux(name: str, out: Any, pair: str = "") -> tuple[Any, Any]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        need = pair or "has_aux=True needs the function to return a pair (out, aux)"
        raise TransformError(f"{name}: {need}, got {_describe(out)}.")
    return out[0], out[1]


class CustomVjp(Generic[P, R]):
    """A function with a custom backward rule (``jax.custom_vjp`` over modules); made
    by ``custom_vjp``. Call it like ``fun``; set the rule with ``defvjp(fwd, bwd)``.

    **Attributes:** ``fun``, ``nondiff_argnums``, and ``fwd``/``bwd``/``symbolic_zeros``
    once ``defvjp`` was called.
    """

    def __init__(self, fun: Callable[P, R], nondiff_argnums: Sequence[int] = ()) -> None:
        require_callable(fun, "custom_vjp")
        for i in nondiff_argnums:
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise TransformError(
                    f"custom_vjp: nondiff_argnums entries must be argument positions "
                    f"(ints >= 0), got {i!r}."
                )
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums: tuple[int, ...] = tuple(sorted(set(nondiff_argnums)))
        self.fwd: Callable[..., tuple[R, Any]] | None = None
        self.bwd: Callable[..., Any] | None = None
        self.symbolic_zeros = False

    def defvjp(
        self,
        fwd: Callable[P, tuple[R, Any]],
        bwd: Callable[..., Any],
        symbolic_zeros: bool = False,
    ) -> None:
        """Set the rule. ``fwd(*args)`` returns ``(out, residual)``;
        ``bwd(*nondiff_args, residual, out_cotangent)`` returns a tuple with one
        cotangent per differentiable argument, shaped like it (``None``, for the whole
        argument or for one of its arrays, is a zero cotangent). ``symbolic_zeros`` as in
        ``jax.custom_vjp.defvjp``."""
        self.fwd, self.bwd, self.symbolic_zeros = fwd, bwd, symbolic_zeros

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        fwd, bwd = self.fwd, self.bwd
        name = getattr(self.fun, "__name__", "function")
        if fwd is None or bwd is None:
            raise TransformError(
                f"custom_vjp: {name} has no backward rule; call {name}.defvjp(fwd, bwd) "
                "before calling it."
            )
        flat_args = _positional(self.fun, args, kwargs)
        n = len(flat_args)
        nondiff = self.nondiff_argnums
        if nondiff and nondiff[-1] >= n:
            raise TransformError(
                f"custom_vjp: nondiff_argnums names argument {nondiff[-1]} but {name} got "
                f"{n} arguments."
            )
        packed = [pack(a) for a in flat_args]
        skels = [s for s, _, _ in packed]
        cell: dict[str, Any] = {}
        zeros = self.symbolic_zeros

        def run(f: Callable[..., Any], arrays: Sequence[list[Any]]) -> Any:
            # JAX may hand the rules a Python-number literal (a differentiated Python
            # float's primal): made an array again, so it is not taken for a static leaf.
            arrays = [[_as_array(x) for x in a] for a in arrays]
            return f(*(unpack(s, a) for s, a in zip(skels, arrays)))

        def fun_flat(*arrays: list[Any]) -> list[Any]:
            oskel, oarrays, _ = pack(run(self.fun, arrays))
            cell["out"] = oskel
            return oarrays

        def fwd_flat(*arrays: list[Any]) -> Any:
            arrays_ = list(arrays)
            if zeros:  # nondiff arguments are plain values, as in jax.custom_vjp
                for i in nondiff:
                    arrays_[i] = [p.value for p in arrays_[i]]
            out, residual = _out_and_aux(
                "custom_vjp", run(fwd, arrays_), "fwd must return a pair (out, residual)"
            )
            oskel, oarrays, _ = pack(out)
            rskel, rarrays, _ = pack(residual)
            cell["out"], cell["res"] = oskel, rskel
            return oarrays, (rarrays, [arrays_[i] for i in nondiff])

        def bwd_flat(res: Any, out_ct: list[Any]) -> tuple[list[Any], ...]:
            rarrays, nd_arrays = res
            nondiff_args = [unpack(skels[i], a) for i, a in zip(nondiff, nd_arrays)]
            cts = bwd(*nondiff_args, unpack(cell["res"], rarrays), unpack(cell["out"], out_ct))
            n_diff = n - len(nondiff)
            if not isinstance(cts, (tuple, list)) or len(cts) != n_diff:
                raise TransformError(
                    f"custom_vjp: bwd must return a tuple of {n_diff} cotangents (one per "
                    f"differentiable argument of {name}), got {_describe(cts)}."
                )
            it = iter(cts)
            return tuple(
                [None] * len(packed[i][1])
                if i in nondiff
                else _cotangent_arrays(skels[i], next(it), i)
                for i in range(n)
            )

        custom = jax.custom_vjp(fun_flat)
        custom.defvjp(fwd_flat, bwd_flat, symbolic_zeros=zeros)
        out_arrays = custom(*(a for _, a, _ in packed))
        return unpack(cell["out"], out_arrays)


@overload
def custom_vjp(fun: Callable[P, R], *, nondiff_argnums: Sequence[int] = ()) -> CustomVjp[P, R]: ...
@overload
def custom_vjp(
    fun: None = None, *, nondiff_argnums: Sequence[int] = ()
) -> Callable[[Callable[P, R]], CustomVjp[P, R]]: ...
def custom_vjp(
    fun: Callable[..., Any] | None = None, *, nondiff_argnums: Sequence[int] = ()
) -> Any:
    """``jax.custom_vjp`` over modules: ``fun`` with a backward rule of your own.

    ``pm.custom_vjp(fun)`` (or ``@pm.custom_vjp``, ``@pm.custom_vjp(nondiff_argnums=...)``)
    returns a ``CustomVjp``; set its rule with ``.defvjp(fwd, bwd)``:

    - ``fwd(*args)`` returns ``(out, residual)``; ``out`` is what ``fun`` returns.
    - ``bwd(*nondiff_args, residual, out_cotangent)`` returns a tuple with one cotangent
      per differentiable argument, shaped like that argument (a module of the same type
      for a module). ``None`` is a zero cotangent, for a whole argument or one array.

    As in pytreemod's other transforms, only arrays are inputs: non-array leaves (Python
    numbers, strings, functions) are static. They reach ``fun``/``fwd``/``bwd`` as they
    are, their cotangent is not asked for (whatever ``bwd`` puts there is ignored), and
    the output's and residual's non-array leaves come back unchanged (so a residual may
    hold any value). Arguments at ``nondiff_argnums`` are given to ``bwd`` first and get
    no cotangent; unlike ``jax.custom_vjp`` they may hold traced arrays.

    >>> import jax, jax.numpy as jnp, pytreemod as pm
    >>> @pm.custom_vjp
    ... def clip_grad(x):
    ...     return x
    >>> clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
    >>> jax.grad(lambda x: 5.0 * clip_grad(x))(2.0)
    Array(1., dtype=float32, weak_type=True)
    """
    if fun is None:
        return functools.partial(custom_vjp, nondiff_argnums=nondiff_argnums)
    return CustomVjp(fun, nondiff_argnums)


def _positional(
    fun: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """``args`` and ``kwargs`` as positional arguments of ``fun`` (defaults filled in)."""
    if not kwargs:
        return args
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except TypeError as e:
        raise TransformError(f"custom_vjp: the arguments do not fit the function: {e}.") from e
    bound.apply_defaults()
    if bound.kwargs:
        raise TransformError(
            f"custom_vjp: keyword-only arguments {sorted(bound.kwargs)} cannot be "
            "differentiated by position; make them positional or close over them."
        )
    return tuple(bound.args)


def _cotangent_arrays(skel: Skeleton, ct: Any, index: int) -> list[Any]:
    """The arrays of ``ct``, a cotangent shaped like the argument ``skel`` packed, in the
    order of its arrays (``None`` for a zero)."""
    n = sum(skel.mask)
    if ct is None:
        return [None] * n
    structure = skel.structure
    try:
        at_leaves = structure.treedef.flatten_up_to(ct)
        values: list[Any] = [None] * len(structure.paths)
        for leaf, c in zip(structure.leaves, at_leaves):
            if isinstance(leaf, _Hole) and structure.alias[leaf.index] is None:
                values[leaf.index] = slot_value(c)
        flat = skel.vdef.flatten_up_to([values[s] for s in skel.slots])
    except (ValueError, TypeError) as e:
        raise TransformError(
            f"custom_vjp: bwd's cotangent for argument {index} has the structure "
            f"{jax.tree.structure(ct)} but the argument has {structure.treedef}; return a "
            "tree shaped like the argument (None for a zero cotangent)."
        ) from e
    return [c for c, m in zip(flat, skel.mask) if m]


def _as_array(x: Any) -> Any:
    return x if is_array(x) or isinstance(x, CustomVJPPrimal) else jnp.asarray(x)


def _describe(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return type(x).__name__
