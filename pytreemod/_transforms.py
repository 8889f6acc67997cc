"""JAX transforms over modules: ``grad``, ``vmap``, ``scan``, ``remat``, ``cond``, ...

A module argument is just a PyTree, so ``vmap(f, in_axes=(1, 0))`` means what a JAX user
thinks (the JAX-style-transforms note). Finer control puts a lift type where JAX expects
an axis or an argnum:

- ``StateAxes({filter: axis_or_None})`` in ``vmap``/``scan`` axes maps each selected
  part of a module's state on its own axis (``scan`` also accepts ``Carry``);
- ``DiffState(argnum, filter)`` in ``grad``'s ``argnums`` differentiates only the
  selected state and returns the gradient as that state (a nested dict).

Every transform packs its inputs with ``_pack`` (non-arrays static, shared Variables one
value) and, where it adds or removes an axis of an axis-metadata box, calls the box's
``add_axis``/``remove_axis`` with the user's ``metadata_params``.
"""

import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import (
    Any,
    Concatenate,
    Final,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    TypeVarTuple,
    cast,
    overload,
)

import jax
import jax.numpy as jnp

from ._errors import TransformError, require_callable
from ._filters import Filter, FilterLike, check_collections, to_filter
from ._meta import add_axis, remove_axis
from ._pack import Skeleton, pack, unpack
from ._partition import State, partition
from ._tree import Path, format_path, is_inexact_array
from ._variables import Variable

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A")
Ts = TypeVarTuple("Ts")


class _CarryType:
    """The ``Carry`` marker of ``scan``'s ``in_axes``/``out_axes`` and ``StateAxes``."""

    _instance: "_CarryType | None" = None

    def __new__(cls) -> "_CarryType":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "Carry"

    def __reduce__(self) -> str:
        return "Carry"


Carry: Final[_CarryType] = _CarryType()
"""Marks state carried from one ``scan`` iteration to the next."""


class StateAxes:
    """Per-filter axes for one module argument of ``vmap`` or ``scan``.

    ``StateAxes({"params": 0, "batch_stats": None})`` maps parameters on axis 0 and
    broadcasts batch statistics; in ``scan`` a value may also be ``Carry``. A variable
    goes to the first filter that matches it; a variable no filter matches is an error
    (end with ``...: None`` to broadcast the rest).
    """

    __slots__ = ("items",)

    def __init__(self, axes: Mapping[FilterLike, Any]):
        items = tuple((to_filter(f), a) for f, a in axes.items())
        for f, _ in items:
            check_collections(f, "StateAxes")
        for _, a in items:
            if not (a is None or a is Carry or isinstance(a, int)):
                raise TransformError(
                    f"StateAxes values must be an int axis, None or Carry, got {a!r}."
                )
        object.__setattr__(self, "items", items)

    def axis_for(self, path: Path, value: Any) -> Any:
        for filt, axis in self.items:
            if filt(path, value):
                return axis
        raise _Unmatched

    def __repr__(self) -> str:
        return "StateAxes({" + ", ".join(f"{f!r}: {a!r}" for f, a in self.items) + "})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateAxes) and self.items == other.items

    def __hash__(self) -> int:
        return hash(self.items)


class _Unmatched(Exception):
    pass


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


def _is_axis_leaf(spec: Any) -> bool:
    return spec is None or spec is Carry or isinstance(spec, (int, StateAxes))


def _describe(path: Path, root: str) -> str:
    """Render ``path`` for a message: root ``"args"`` is a packed ``(args, kwargs)`` pair,
    ``"*args"`` a packed tuple of positional arguments (``scan``)."""
    if root == "*args":
        return f"args{format_path(path)}" if path else "args"
    if root == "args" and len(path) > 1:
        head, key, rest = path[0], path[1], path[2:]
        tail = format_path(rest) if rest else ""  # not "<root>" after args[i]
        if head == 0:
            return f"args[{key}]{tail}"
        if head == 1:
            return f"kwargs[{key!r}]{tail}"
    return f"{root}{format_path(path)}" if path else root


def _resolve(spec: Any, path: Path, value: Any, what: str, root: str) -> Any:
    """The axis (int, None or Carry) ``spec`` gives the variable at ``path``."""
    for i in range(len(path) + 1):
        if isinstance(spec, bool):
            raise TransformError(
                f"{what}: {spec!r} at {_describe(path[:i], root)} is not an axis; use an int "
                "axis, None, StateAxes or a tuple/dict of them."
            )
        if spec is None or spec is Carry or isinstance(spec, int):
            return spec
        if isinstance(spec, StateAxes):
            try:
                return spec.axis_for(path[i:], value)
            except _Unmatched:
                raise TransformError(
                    f"{what}: {spec!r} does not match {_describe(path, root)} (collection "
                    f"{_collection(value)!r}); add a filter for it, e.g. `...: None` to "
                    "broadcast everything else."
                ) from None
        if i == len(path):
            break
        key = path[i]
        try:
            if isinstance(spec, Mapping):
                spec = spec[key]
            elif isinstance(spec, (tuple, list)):
                spec = spec[cast(int, key)]
            else:
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise TransformError(
                f"{what}: the spec {spec!r} does not fit the tree at "
                f"{_describe(path[: i + 1], root)}; give an int, None or StateAxes there, or "
                "a tuple/dict prefix with an entry per element."
            ) from None
    raise TransformError(
        f"{what}: {spec!r} is not a valid axis spec at {_describe(path, root)}; use an int, "
        "None, StateAxes or a tuple/dict of them."
    )


def _collection(value: Any) -> str:
    return value.collection if isinstance(value, Variable) else "params"


def _slot_specs(
    skel: Skeleton, slot_values: list[Any], spec: Any, what: str, root: str
) -> dict[int, Any]:
    """Resolve ``spec`` for every slot and reject inconsistent specs for shared Variables."""
    out: dict[int, Any] = {}
    value_of = dict(zip(skel.slots, slot_values))
    for slot in skel.slots:
        out[slot] = _resolve(spec, skel.path(slot), value_of[slot], what, root)
    for slot, first in enumerate(skel.structure.alias):
        if first is None:
            continue
        mine = _resolve(spec, skel.path(slot), value_of[first], what, root)
        if mine != out[first]:
            raise TransformError(
                f"{what}: {_describe(skel.path(first), root)} and "
                f"{_describe(skel.path(slot), root)} are the same Variable (shared), but "
                f"get different specs ({out[first]!r} and {mine!r}). Give every alias of a "
                "variable the same spec."
            )
    return out


def _args_spec(spec: Any, nargs: int, what: str) -> Any:
    if isinstance(spec, list):
        spec = tuple(spec)
    if isinstance(spec, tuple):
        if len(spec) != nargs:
            raise TransformError(
                f"{what} has {len(spec)} entries but the function got {nargs} positional "
                "arguments; give one entry per argument (or a single int/None/StateAxes for "
                "all of them)."
            )
    return spec


def _remove_axis(axis: int, params: Mapping[Any, Any]) -> Callable[[Any], Any]:
    return lambda value: remove_axis(value, axis, params)


def _add_axis(axis: int, params: Mapping[Any, Any]) -> Callable[[Any], Any]:
    return lambda value: add_axis(value, axis, params)


# ----------------------------------------------------------------------------- grad


# The overloads type the result after ``argnums``: the first argument's own type (argnums
# 0, the default; bound when the wrapper is called, so ``pm.grad(lambda m: ...)(model)``
# is typed like ``model``), a ``State`` (a ``DiffState``) or ``Any`` (anything else).
@overload
def value_and_grad(
    fun: Callable[Concatenate[Any, P], R], *, argnums: Literal[0] = 0, has_aux: bool = False
) -> "_ValueAndGradFn[P, R]": ...
@overload
def value_and_grad(
    fun: Callable[P, R], *, argnums: DiffState, has_aux: bool = False
) -> Callable[P, tuple[R, State]]: ...
@overload
def value_and_grad(
    fun: Callable[P, R], *, argnums: _Argnums = 0, has_aux: bool = False
) -> Callable[P, tuple[R, Any]]: ...
# (The decorator forms below "overlap" the general one only in how pyright compares
# generic callables; the first matching overload is the one that applies.)
@overload
def value_and_grad(  # pyright: ignore[reportOverlappingOverload]
    fun: None = None, *, argnums: Literal[0] = 0, has_aux: bool = False
) -> Callable[[Callable[Concatenate[Any, P], R]], "_ValueAndGradFn[P, R]"]: ...
@overload
def value_and_grad(
    fun: None = None, *, argnums: DiffState, has_aux: bool = False
) -> Callable[[Callable[P, R]], Callable[P, tuple[R, State]]]: ...
@overload
def value_and_grad(
    fun: None = None, *, argnums: _Argnums = 0, has_aux: bool = False
) -> Callable[[Callable[P, R]], Callable[P, tuple[R, Any]]]: ...
def value_and_grad(
    fun: Callable[..., Any] | None = None,
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
) -> Any:
    """``jax.value_and_grad`` over modules. See ``grad`` for ``argnums``.

    Returns ``(value, grads)`` where ``value`` is what ``fun`` returns (``(loss, aux)``
    with ``has_aux``); the types follow ``fun``'s as for ``grad``.
    """
    if fun is None:
        return functools.partial(value_and_grad, argnums=argnums, has_aux=has_aux)
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
                    and is_inexact_array(arrays[i])
                ):
                    chosen.append((i, k))
                    break

        def f(diff: list[Any]) -> Any:
            full = list(arrays)
            for (i, _), x in zip(chosen, diff):
                full[i] = x
            return fun_(*unpack(skel, full), **kwargs)

        value, grads = jax.value_and_grad(f, has_aux=has_aux)([arrays[i] for i, _ in chosen])
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
) -> "_GradFn[P]": ...
@overload
def grad(
    fun: Callable[Concatenate[Any, P], tuple[Any, A]],
    *,
    argnums: Literal[0] = 0,
    has_aux: Literal[True],
) -> "_GradAuxFn[P, A]": ...
@overload
def grad(
    fun: Callable[P, Any], *, argnums: DiffState, has_aux: Literal[False] = False
) -> Callable[P, State]: ...
@overload
def grad(
    fun: Callable[P, tuple[Any, A]], *, argnums: DiffState, has_aux: Literal[True]
) -> Callable[P, tuple[State, A]]: ...
@overload
def grad(
    fun: Callable[P, Any], *, argnums: _Argnums = 0, has_aux: bool = False
) -> Callable[P, Any]: ...
@overload
def grad(  # pyright: ignore[reportOverlappingOverload]
    fun: None = None, *, argnums: Literal[0] = 0, has_aux: Literal[False] = False
) -> Callable[[Callable[Concatenate[Any, P], Any]], "_GradFn[P]"]: ...
@overload
def grad(
    fun: None = None, *, argnums: Literal[0] = 0, has_aux: Literal[True]
) -> Callable[[Callable[Concatenate[Any, P], tuple[Any, A]]], "_GradAuxFn[P, A]"]: ...
@overload
def grad(
    fun: None = None, *, argnums: DiffState, has_aux: Literal[False] = False
) -> Callable[[Callable[P, Any]], Callable[P, State]]: ...
@overload
def grad(
    fun: None = None, *, argnums: DiffState, has_aux: Literal[True]
) -> Callable[[Callable[P, tuple[Any, A]]], Callable[P, tuple[State, A]]]: ...
@overload
def grad(
    fun: None = None, *, argnums: _Argnums = 0, has_aux: bool = False
) -> Callable[[Callable[P, Any]], Callable[P, Any]]: ...
def grad(
    fun: Callable[..., Any] | None = None,
    *,
    argnums: _Argnums = 0,
    has_aux: bool = False,
) -> Any:
    """``jax.grad`` over modules.

    **Arguments:**

    - ``fun``: scalar-valued function (or use as ``@pm.grad(argnums=...)``).
    - ``argnums``: an int (gradient shaped like the argument: a module of the same type
      holding gradients, ``None`` where a value is not differentiable), a
      ``DiffState(argnum, filter)`` (gradient of the selected state, as a nested dict like
      ``pytreemod.state(arg, filter)``), or a tuple of these (a tuple of gradients).
    - ``has_aux``: ``fun`` returns ``(value, aux)``; then ``(grads, aux)`` is returned.

    Only floating-point arrays are differentiated. A Variable shared by several places
    (tied weights) gets one gradient, the sum over its uses. If the places are in
    different arguments, the variable belongs to the first argument that holds it: its
    whole gradient is reported there (and ``None`` at the later argument's place).

    Typing: with the default ``argnums=0`` the gradient has the type of ``fun``'s first
    parameter (``pm.grad(loss)(model, x)`` is typed like ``model``); with a ``DiffState``
    it is a ``State``; the wrapper keeps ``fun``'s parameters.
    """
    if fun is None:
        return functools.partial(grad, argnums=argnums, has_aux=has_aux)
    require_callable(fun, "grad")
    vg = value_and_grad(fun, argnums=argnums, has_aux=has_aux)

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


# ----------------------------------------------------------------------------- vmap


@overload
def vmap(
    fun: Callable[P, R],
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Hashable | None = None,
    spmd_axis_name: Any = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[P, R]: ...
@overload
def vmap(
    fun: None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Hashable | None = None,
    spmd_axis_name: Any = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def vmap(
    fun: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Hashable | None = None,
    spmd_axis_name: Any = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Any:
    """``jax.vmap`` over modules.

    ``in_axes``/``out_axes`` are prefixes as in JAX, where a module argument takes an
    int, ``None`` or ``StateAxes({filter: axis_or_None})``. Non-array leaves pass through
    unmapped. Keyword arguments are mapped over axis 0, as in JAX. Axis-metadata boxes in
    mapped state get ``remove_axis(axis, metadata_params)`` inside and mapped outputs
    ``add_axis(axis, metadata_params)``.

    An ensemble of ``n`` independently initialised models is one call::

        models = pm.vmap(lambda k: MLP(..., key=k))(jax.random.split(key, n))

    and ``metadata_params={pm.PARTITION_NAME: "ensemble"}`` names the new axis in the
    models' ``Partitioned`` boxes.

    Typing: the mapped function has ``fun``'s parameters and return type (a batch of
    modules is typed as the module; arrays gain an axis the types do not show).
    """
    if fun is None:
        return functools.partial(
            vmap,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
            metadata_params=metadata_params,
        )
    require_callable(fun, "vmap")
    params: Mapping[Any, Any] = dict(metadata_params or {})
    fun_ = fun

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spec = (_args_spec(in_axes, len(args), "vmap in_axes"), 0)
        skel, arrays, slot_values = pack((args, kwargs))
        slot_axis = _slot_specs(skel, slot_values, spec, "vmap in_axes", "args")
        for slot, ax in slot_axis.items():
            if ax is Carry:
                raise TransformError(
                    f"vmap in_axes: Carry (at {_describe(skel.path(slot), 'args')}) is only "
                    "meaningful in scan; use an int axis or None."
                )
        array_axes = [slot_axis[s] for s in skel.array_slots()]
        _check_mapped_sizes(skel, arrays, array_axes, axis_size)
        cell: dict[str, Any] = {}

        def fix_in(slot: int, value: Any) -> Any:
            ax = slot_axis[slot]
            return value if ax is None else _remove_axis(ax, params)(value)

        def body(arrays: list[Any]) -> Any:
            a, k = unpack(skel, arrays, fix_in)
            out = fun_(*a, **k)
            oskel, oarrays, ovalues = pack(out)
            oaxis = _slot_specs(oskel, ovalues, out_axes, "vmap out_axes", "output")
            axes = [oaxis[s] for s in oskel.array_slots()]
            cell["out"] = (oskel, oaxis, axes)
            mapped = [x for x, ax in zip(oarrays, axes) if ax is not None]
            unmapped = [x for x, ax in zip(oarrays, axes) if ax is None]
            return mapped, unmapped

        mapped, unmapped = jax.vmap(
            body,
            in_axes=(array_axes,),
            out_axes=(0, None),
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
        )(arrays)
        oskel, oaxis, axes = cell["out"]
        it_m, it_u = iter(mapped), iter(unmapped)
        merged = [
            next(it_u) if ax is None else jnp.moveaxis(next(it_m), 0, ax) if ax else next(it_m)
            for ax in axes
        ]

        def fix_out(slot: int, value: Any) -> Any:
            ax = oaxis[slot]
            return value if ax is None else _add_axis(ax, params)(value)

        return unpack(oskel, merged, fix_out)

    return wrapper


def _check_axis(what: str, where: Callable[[], str], shape: tuple[int, ...], ax: int) -> None:
    if not -len(shape) <= ax < len(shape):
        has = "a scalar" if not shape else f"of shape {shape} (rank {len(shape)})"
        raise TransformError(
            f"{what}: {where()} is {has}, which has no axis {ax} to {what} over; give it "
            "in_axes=None (the same value every time) or an axis it has."
        )


def _check_mapped_sizes(
    skel: Skeleton, arrays: list[Any], axes: list[Any], axis_size: int | None
) -> None:
    """Check from shapes alone (before tracing) that each mapped array has its axis and
    all mapped sizes agree: JAX's own errors name the flattened ``arrays[i]``."""
    slots = skel.array_slots()
    by_size: dict[int, list[int]] = {}  # size -> array indices
    for i, (x, ax) in enumerate(zip(arrays, axes)):
        if ax is not None:
            shape = x.shape
            where = functools.partial(_describe, skel.path(slots[i]), "args")
            _check_axis("vmap", where, shape, ax)
            by_size.setdefault(shape[ax], []).append(i)
    if len(by_size) <= 1 and (axis_size is None or set(by_size) <= {axis_size}):
        return

    def group(size: int, idx: list[int]) -> str:
        paths = [_describe(skel.path(slots[i]), "args") for i in idx[:3]]
        more = f" and {len(idx) - 3} more" if len(idx) > 3 else ""
        return f"size {size}: {', '.join(paths)}{more}"

    found = "; ".join(group(n, idx) for n, idx in by_size.items())
    want = f" and axis_size={axis_size}" if axis_size is not None else ""
    raise TransformError(
        f"vmap: the sizes of the mapped axes{want} do not agree: {found}. "
        "Every mapped input needs the same size; give in_axes=None to what is the same "
        "for every element (e.g. in_axes=(None, 0) for a model and a batch)."
    )


# ----------------------------------------------------------------------------- scan


class _CarrySlot:
    """Placeholder for the carry inside a scan's output while the rest is packed."""

    def __repr__(self) -> str:
        return "<carry>"


_CARRY_SLOT = _CarrySlot()


def _contains_carry(spec: Any) -> bool:
    if spec is Carry:
        return True
    if isinstance(spec, StateAxes):
        return any(a is Carry for _, a in spec.items)
    if isinstance(spec, Mapping):
        return any(_contains_carry(v) for v in spec.values())
    if isinstance(spec, (tuple, list)):
        return any(_contains_carry(v) for v in spec)
    return False


def _take_carry(out: Any, spec: Any, found: list[Any]) -> Any:
    """Replace the subtree of ``out`` at the ``Carry`` of ``spec`` by a placeholder."""
    if spec is Carry:
        found.append(out)
        return _CARRY_SLOT
    if isinstance(spec, (tuple, list)) and isinstance(out, (tuple, list)):
        if len(spec) != len(out):
            raise TransformError(
                f"scan out_axes {spec!r} has {len(spec)} entries but the function returned "
                f"{len(out)}; out_axes must be a prefix of the output."
            )
        return type(out)(_take_carry(o, s, found) for o, s in zip(out, spec))
    if isinstance(spec, Mapping) and isinstance(out, Mapping):
        return {k: _take_carry(out[k], spec[k], found) if k in spec else out[k] for k in out}
    return out


@overload
def scan(
    fun: Callable[P, R],
    *,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[P, R]: ...
@overload
def scan(
    fun: None = None,
    *,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def scan(
    fun: Callable[..., Any] | None = None,
    *,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Any:
    """``jax.lax.scan`` with JAX-style axes over modules (scan over layers).

    Each positional argument gets a spec in ``in_axes``: ``Carry`` (threaded through the
    iterations), an int (scanned along that axis), ``None`` (broadcast: the same value
    every iteration) or ``StateAxes({filter: axis | None | Carry})`` to split one module's
    state by collection. ``out_axes`` is a prefix of the output: ``Carry`` marks where the
    function returns the new carry (the carried argument, or a tuple of them in order),
    ints stack the other outputs along that axis.

    For an argument split with ``StateAxes``, the function returns the whole updated
    module at its ``Carry`` position: its carried state is threaded, its scanned state is
    stacked back in place, and its broadcast state is read-only (the input's is kept).

    The scan-over-layers pattern::

        layers = pm.vmap(lambda k: Block(..., key=k))(jax.random.split(key, depth))

        @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry)
        def forward(x, block):
            return block(x)

        y = forward(x, layers)

    Boxes in scanned state get ``remove_axis(axis, metadata_params)`` inside and scanned
    outputs ``add_axis(axis, metadata_params)``.

    Typing: the scanned function has ``fun``'s parameters and return type (stacked
    outputs gain an axis the types do not show). Arguments are positional only.
    """
    if fun is None:
        return functools.partial(
            scan,
            in_axes=in_axes,
            out_axes=out_axes,
            length=length,
            reverse=reverse,
            unroll=unroll,
            metadata_params=metadata_params,
        )
    require_callable(fun, "scan")
    params: Mapping[Any, Any] = dict(metadata_params or {})
    fun_ = fun

    @functools.wraps(fun)
    def wrapper(*args: Any) -> Any:
        spec = _args_spec(in_axes, len(args), "scan in_axes")
        arg_specs = spec if isinstance(spec, tuple) else (spec,) * len(args)
        carry_args = [i for i, s in enumerate(arg_specs) if _contains_carry(s)]
        if bool(carry_args) != _contains_carry(out_axes):
            raise TransformError(
                "scan: in_axes and out_axes must both contain Carry or neither does "
                f"(in_axes={in_axes!r}, out_axes={out_axes!r})."
            )
        skel, arrays, slot_values = pack(args)
        mode = _slot_specs(skel, slot_values, spec, "scan in_axes", "*args")
        amode = [mode[s] for s in skel.array_slots()]
        carry_idx = [i for i, m in enumerate(amode) if m is Carry]
        xs_idx = [i for i, m in enumerate(amode) if isinstance(m, int) and m is not Carry]
        for i in xs_idx:
            where = functools.partial(_describe, skel.path(skel.array_slots()[i]), "*args")
            _check_axis("scan", where, arrays[i].shape, amode[i])
        xs = [jnp.moveaxis(arrays[i], amode[i], 0) if amode[i] else arrays[i] for i in xs_idx]
        n = length
        for i, x in zip(xs_idx, xs):
            if n is None:
                n = x.shape[0]
            elif x.shape[0] != n:
                where = _describe(skel.path(skel.array_slots()[i]), "*args")
                raise TransformError(
                    f"scan: {where} has length {x.shape[0]} along its scanned axis but the "
                    f"scan length is {n}; every scanned input must have the same length."
                )
        if n is None:
            raise TransformError(
                "scan: no input is scanned (no int in in_axes), so pass length=... ."
            )
        # Carried arguments, packed on their own, to check the body keeps their structure.
        carry_tree_in = tuple(args[i] for i in carry_args)
        cell: dict[str, Any] = {}

        def fix_in(slot: int, value: Any) -> Any:
            m = mode[slot]
            if m is None or m is Carry:
                return value
            return _remove_axis(m, params)(value)

        def body(carry: list[Any], x: list[Any]) -> Any:
            full = list(arrays)
            for i, c in zip(carry_idx, carry):
                full[i] = c
            for i, v in zip(xs_idx, x):
                full[i] = v
            inner_args = unpack(skel, full, fix_in)
            inner_carry = tuple(inner_args[i] for i in carry_args)
            out = fun_(*inner_args)
            found: list[Any] = []
            rest = _take_carry(out, out_axes, found)
            new_carry: list[Any] = []
            state_ys: list[Any] = []
            if carry_args:
                if len(found) != 1:
                    raise TransformError(
                        f"scan: out_axes={out_axes!r} must contain exactly one Carry."
                    )
                returned = found[0] if len(carry_args) > 1 else (found[0],)
                new_carry, state_ys = _split_new_carry(
                    inner_carry, returned, [arg_specs[i] for i in carry_args]
                )
            yskel, yarrays, yvalues = pack(rest)
            yaxis = _slot_specs(yskel, yvalues, out_axes, "scan out_axes", "output")
            for slot, ax in yaxis.items():
                if ax is None:
                    raise TransformError(
                        f"scan out_axes: None at {_describe(yskel.path(slot), 'output')}; "
                        "outputs other than the carry are stacked over iterations, so give "
                        "an int axis (or return the value as part of the carry)."
                    )
            cell["ys"] = (yskel, yaxis)
            return new_carry, (yarrays, state_ys)

        final, (ys, state_ys) = jax.lax.scan(
            body,
            [arrays[i] for i in carry_idx],
            xs,
            length=n,
            reverse=reverse,
            unroll=unroll,
        )
        yskel, yaxis = cell["ys"]
        ys_axes = [yaxis[s] for s in yskel.array_slots()]
        ys = [
            jnp.moveaxis(y, 0, ax) if isinstance(ax, int) and ax else y
            for y, ax in zip(ys, ys_axes)
        ]

        def fix_out(slot: int, value: Any) -> Any:
            ax = yaxis[slot]
            return value if not isinstance(ax, int) or ax is Carry else _add_axis(ax, params)(value)

        out = unpack(yskel, ys, fix_out)
        if not carry_args:
            return out
        # Rebuild the carried arguments: carried state from the final carry, scanned state
        # from the stacked per-iteration values, broadcast state from the input.
        cskel, carrays, cvalues = pack(carry_tree_in)
        cmode = _slot_specs(
            cskel, cvalues, tuple(arg_specs[i] for i in carry_args), "scan in_axes", "carry"
        )
        it_final, it_state = iter(final), iter(state_ys)
        rebuilt = []
        for x, slot in zip(carrays, cskel.array_slots()):
            m = cmode[slot]
            if m is Carry:
                rebuilt.append(next(it_final))
            elif m is None:
                rebuilt.append(x)
            else:
                y = next(it_state)
                rebuilt.append(jnp.moveaxis(y, 0, m) if m else y)
        carry_out = unpack(cskel, rebuilt)
        carry_value = carry_out if len(carry_args) > 1 else carry_out[0]
        return jax.tree.map(
            lambda leaf: carry_value if leaf is _CARRY_SLOT else leaf,
            out,
            is_leaf=lambda leaf: leaf is _CARRY_SLOT,
        )

    return wrapper


def _split_new_carry(
    inner: tuple[Any, ...], returned: Any, specs: list[Any]
) -> tuple[list[Any], list[Any]]:
    """Split the carried arguments the body returned into (carry arrays, scanned arrays)."""
    if not isinstance(returned, tuple) or len(returned) != len(inner):
        raise TransformError(
            f"scan: the Carry output must be the {len(inner)} carried argument(s) "
            f"{'as a tuple ' if len(inner) > 1 else ''}in order; got {type(returned).__name__}."
        )
    skel_in, _, _ = pack(inner)
    skel_out, arrays, values = pack(returned)
    if skel_in != skel_out:
        raise TransformError(
            "scan: the carry returned by the body does not have the structure of the carry "
            f"it received (input {skel_in.structure.treedef}, output "
            f"{skel_out.structure.treedef}); carried state must keep its variables, "
            "static fields and metadata from one iteration to the next."
        )
    mode = _slot_specs(skel_out, values, tuple(specs), "scan in_axes", "carry")
    carry, state = [], []
    for x, slot in zip(arrays, skel_out.array_slots()):
        m = mode[slot]
        if m is Carry:
            carry.append(x)
        elif m is not None:
            state.append(x)
    return carry, state


# ----------------------------------------------------------------------------- the rest


@overload
def remat(
    fun: Callable[P, R],
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
) -> Callable[P, R]: ...
@overload
def remat(
    fun: None = None,
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def remat(
    fun: Callable[..., Any] | None = None,
    *,
    policy: Callable[..., bool] | None = None,
    prevent_cse: bool = True,
) -> Any:
    """``jax.checkpoint`` over modules: recompute ``fun``'s intermediates in the backward
    pass instead of storing them. ``policy`` is one of ``jax.checkpoint_policies``."""
    if fun is None:
        return functools.partial(remat, policy=policy, prevent_cse=prevent_cse)
    require_callable(fun, "remat (checkpoint)")
    fun_ = fun

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        skel, arrays, _ = pack((args, kwargs))
        cell: dict[str, Skeleton] = {}

        def inner(arrays: list[Any]) -> list[Any]:
            a, k = unpack(skel, arrays)
            oskel, oarrays, _ = pack(fun_(*a, **k))
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


def while_loop(cond_fun: Callable[[T], Any], body_fun: Callable[[T], T], init_val: T) -> T:
    """``jax.lax.while_loop`` over modules; the loop state keeps its structure."""
    skel, arrays, _ = pack(init_val)

    def c(arrays: list[Any]) -> Any:
        return cond_fun(unpack(skel, arrays))

    def b(arrays: list[Any]) -> list[Any]:
        new_skel, new_arrays, _ = pack(body_fun(unpack(skel, arrays)))
        if new_skel != skel:
            raise TransformError(
                "while_loop: body_fun returned a loop state whose structure differs from "
                f"init_val ({new_skel.structure.treedef} vs {skel.structure.treedef}); "
                "keep the same variables and static fields, and create none in the body."
            )
        return new_arrays

    return unpack(skel, jax.lax.while_loop(c, b, arrays))


def eval_shape(fun: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``jax.eval_shape`` over modules: arrays in the output become ``ShapeDtypeStruct``s,
    everything else is returned as is. Useful to build a model without allocating it.

    Typed as ``fun``'s return type (a model skeleton is typed as the model), though its
    arrays are ``ShapeDtypeStruct``s."""
    require_callable(fun, "eval_shape")
    skel, arrays, _ = pack((args, kwargs))
    cell: dict[str, Skeleton] = {}

    def inner(arrays: list[Any]) -> list[Any]:
        a, k = unpack(skel, arrays)
        oskel, oarrays, _ = pack(fun(*a, **k))
        cell["out"] = oskel
        return oarrays

    shapes = jax.eval_shape(inner, arrays)
    return unpack(cell["out"], shapes)
