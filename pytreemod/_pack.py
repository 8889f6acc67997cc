"""Pack a tree into its arrays and a hashable skeleton: the primitive under every transform.

``pack(tree)`` walks the tree once (``_partition._split``): a Variable shared by several
places (tied weights) becomes one slot, so it is one array inside a transform, its
gradient is the sum over its uses, and ``unpack`` puts one Variable object back in every
place. Non-array leaves (functions, strings, Python numbers) are static: they live in the
skeleton, which is hashable and comparable, so it can key a compilation cache or be
closed over by a JAX transform. Every array knows its slot, so a transform can give each
slot its own axis (``StateAxes``) and update the slot's axis-metadata box when it adds or
removes an axis.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.tree_util as jtu

from ._meta import slot_value
from ._partition import Structure, _build, _split
from ._tree import Path, is_array


class Skeleton:
    """Everything in a packed tree but its arrays. Hashable; equal skeletons rebuild alike."""

    __slots__ = ("_hash", "mask", "slot_of_leaf", "static", "structure", "vdef")

    def __init__(
        self,
        structure: Structure,
        vdef: Any,
        static: tuple[Any, ...],
        mask: tuple[bool, ...],
        slot_of_leaf: tuple[int, ...],
    ):
        self.structure = structure
        self.vdef = vdef
        self.static = static
        self.mask = mask
        self.slot_of_leaf = slot_of_leaf
        self._hash: int | None = None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Skeleton)
            and self.mask == other.mask
            and self.vdef == other.vdef
            and self.structure == other.structure
            and self.static == other.static
        )

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.structure, self.vdef, self.static, self.mask))
        return self._hash

    @property
    def slots(self) -> list[int]:
        """Indices of the slots that carry values (aliases of earlier slots excluded)."""
        return [i for i, a in enumerate(self.structure.alias) if a is None]

    def array_slots(self) -> list[int]:
        """The slot of each array, in array order."""
        return [s for s, m in zip(self.slot_of_leaf, self.mask) if m]

    def path(self, slot: int) -> Path:
        """The path of a slot in the packed tree."""
        return self.structure.paths[slot]


def pack(tree: Any) -> tuple[Skeleton, list[Any], list[Any]]:
    """Split ``tree`` into ``(skeleton, arrays, slot_values)``.

    ``slot_values`` holds, per value-carrying slot, the Variable (or bare array/box) found
    there, for filters that select by collection or type.
    """
    structure, values = _split(tree)
    slots = [i for i, a in enumerate(structure.alias) if a is None]
    slot_values = [values[i] for i in slots]
    unwrapped = [slot_value(v) for v in slot_values]
    leaves: list[Any] = []
    slot_of_leaf: list[int] = []
    for slot, value in zip(slots, unwrapped):
        sub = jtu.tree_leaves(value)
        leaves.extend(sub)
        slot_of_leaf.extend([slot] * len(sub))
    vdef = jtu.tree_structure(unwrapped)
    mask = tuple(is_array(x) or isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    static = tuple(None if m else x for x, m in zip(leaves, mask))
    arrays = [x for x, m in zip(leaves, mask) if m]
    skeleton = Skeleton(structure, vdef, static, mask, tuple(slot_of_leaf))
    return skeleton, arrays, slot_values


def unpack(
    skeleton: Skeleton,
    arrays: Sequence[Any],
    slot_fn: Callable[[int, Any], Any] | None = None,
) -> Any:
    """Rebuild the tree from its skeleton and (new) arrays.

    ``slot_fn(slot, value)`` may adjust each slot's unwrapped value first (a transform uses
    it to call ``add_axis``/``remove_axis`` on axis-metadata boxes).
    """
    it = iter(arrays)
    leaves = [next(it) if m else s for s, m in zip(skeleton.static, skeleton.mask)]
    unwrapped = jtu.tree_unflatten(skeleton.vdef, leaves)
    slots = skeleton.slots
    full: list[Any] = [None] * len(skeleton.structure.paths)
    for slot, value in zip(slots, unwrapped):
        full[slot] = slot_fn(slot, value) if slot_fn is not None else value
    return _build(skeleton.structure, full)
