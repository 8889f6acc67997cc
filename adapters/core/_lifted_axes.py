"""What ``lift.vmap`` and ``lift.scan`` share: the axis specs (``In``, ``Out``,
``broadcast``, one spec per argument, the mapped size), the split of rng keys, and Flax's
check that a mapped ``Partitioned`` box has a ``partition_name``.

The boxes' axes themselves are not handled here: the lifted transforms pass the boxes and
``metadata_params`` to ``pm.vmap``/``pm.scan``, which call ``pm.remove_axis`` and
``pm.add_axis`` (pytreemod's one implementation).
"""

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

import jax

import pytreemod as pm

from ._errors import LiftError, PartitioningUnspecifiedError


class _Broadcast:
    """Marks a ``scan`` argument (in ``in_axes``) that every iteration sees whole."""

    def __repr__(self) -> str:
        return "broadcast"


broadcast: _Broadcast = _Broadcast()
"""``in_axes`` entry of ``lift.scan`` for an argument that is not scanned over."""


_A = TypeVar("_A")


@dataclasses.dataclass(frozen=True)
class In(Generic[_A]):
    """``variable_axes`` value used only for the transform's inputs."""

    axis: _A


@dataclasses.dataclass(frozen=True)
class Out(Generic[_A]):
    """``variable_axes`` value used only for the transform's outputs."""

    axis: _A


def split_in_out_axes(xs: Mapping[Any, Any]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    unwrap = lambda v: v.axis if isinstance(v, (In, Out)) else v
    ins = {k: unwrap(v) for k, v in xs.items() if not isinstance(v, Out)}
    outs = {k: unwrap(v) for k, v in xs.items() if not isinstance(v, In)}
    return ins, outs


def per_arg(spec: Any, nargs: int, what: str) -> tuple[Any, ...]:
    """One spec per positional argument (a single spec applies to all of them)."""
    if isinstance(spec, (tuple, list)):
        if len(spec) != nargs:
            raise LiftError(
                f"{what} has {len(spec)} entries but {nargs} positional argument(s) were "
                "given (after the scope); give one entry per argument or a single axis."
            )
        return tuple(spec)
    return (spec,) * nargs


def axis_leaves(spec: Any, tree: Any, what: str) -> list[tuple[Any, Any]]:
    """``(axis, array)`` for every array under ``tree``, with ``spec`` as a prefix."""
    pairs: list[tuple[Any, Any]] = []

    def visit(axis: Any, sub: Any) -> None:
        pairs.extend((axis, leaf) for leaf in jax.tree.leaves(sub) if pm.is_array(leaf))

    try:
        jax.tree.map(visit, spec, tree, is_leaf=lambda x: x is None or x is broadcast)
    except (ValueError, TypeError) as e:
        raise LiftError(
            f"{what} {spec!r} is not a prefix of the arguments' structure ({e})."
        ) from None
    return pairs


def mapped_size(given: int | None, pairs: list[tuple[Any, Any]], what: str, name: str) -> int:
    sizes = {leaf.shape[ax] for ax, leaf in pairs if isinstance(ax, int)}
    if given is not None:
        return given
    if len(sizes) > 1:
        raise LiftError(f"lift.{name}: inconsistent {what}s {sorted(sizes)} of the inputs.")
    if not sizes:
        raise LiftError(
            f"lift.{name}: the {what} cannot be inferred (no input is mapped); pass "
            f"{'axis_size' if name == 'vmap' else 'length'}=... ."
        )
    return sizes.pop()


def split_keys(group: tuple[dict[str, Any], ...], n: int) -> tuple[dict[str, Any], ...]:
    # The keys inside each LazyRng are split (its path suffix is kept), as in Flax.
    return tuple(jax.tree.map(lambda k: jax.random.split(k, n), g) for g in group)


def no_broadcast(spec: Any) -> Any:
    """``broadcast`` entries of a scan spec become ``None`` (pytreemod's spelling)."""
    if spec is broadcast:
        return None
    if isinstance(spec, (tuple, list)):
        return type(spec)(no_broadcast(s) for s in spec)
    if isinstance(spec, Mapping):
        return {k: no_broadcast(v) for k, v in spec.items()}
    return spec


def contains(spec: Any, marker: Any) -> bool:
    if spec is marker:
        return True
    if isinstance(spec, (tuple, list)):
        return any(contains(s, marker) for s in spec)
    if isinstance(spec, Mapping):
        return any(contains(s, marker) for s in spec.values())
    return False


# ----------------------------------------------------------------------------- boxes


def check_partition_name(groups: Iterable[Any], axes: Iterable[Any], params: Any) -> None:
    """Flax's rule: a ``Partitioned`` box that gains or loses a mapped axis needs the
    axis's name in ``metadata_params`` (``PartitioningUnspecifiedError`` otherwise)."""
    if pm.PARTITION_NAME in params:
        return
    for group, axis in zip(groups, axes):
        if axis is None:
            continue
        for leaf in jax.tree.leaves(group, is_leaf=pm.is_box):
            if isinstance(leaf, pm.Partitioned):
                raise PartitioningUnspecifiedError(leaf)
