"""``shard_map`` over modules: ``jax.shard_map`` with ``in_specs``/``out_specs`` as
prefixes over arguments and outputs that hold modules.

The arguments are packed (``_pack``): each array gets the spec of the prefix entry above
it (a ``PartitionSpec`` in a module's place covers all its arrays; a Variable in the spec
tree, as ``get_partition_spec`` returns, covers its own). A Variable shared by several
places is one array, so its places must agree on its spec. Inputs are checked against
the mesh before the call (``ShardingError`` naming the path). The output specs are
matched against the output inside the mapped function, once its structure is known; the
arrays are handed to JAX grouped by spec (one dict per distinct ``PartitionSpec`` of
``out_specs``, keyed by path, so JAX's own errors name the output).
"""

import functools
import inspect
from collections.abc import Callable, Hashable, Set
from typing import Any, ParamSpec, TypeVar, overload

import jax
import jax.tree_util as jtu
from jax.sharding import AbstractMesh, Mesh, PartitionSpec

from ._errors import ShardingError, TransformError, require_callable
from ._meta import AxisMetadata, slot_value
from ._pack import Skeleton, pack, unpack
from ._partition import _Hole, _is_slot_leaf
from ._sharding._mesh import context_mesh, named_sharding
from ._sharding._trees import _check_fits
from ._transforms_axes import _describe
from ._tree import Path, flatten_one_level, format_path, key_of
from ._variables import Variable

P = ParamSpec("P")
R = TypeVar("R")

Infer: Any = inspect.signature(jax.shard_map).parameters["in_specs"].default
"""JAX's ``in_specs`` default (``jax.sharding.Infer`` in its docs, not exported): every
input's spec read from its type (all mesh axes Explicit)."""


@overload
def shard_map(
    fun: Callable[P, R],
    /,
    *,
    out_specs: Any,
    in_specs: Any = Infer,
    mesh: Mesh | AbstractMesh | None = None,
    axis_names: Set[Hashable] = frozenset(),
    check_vma: bool = True,
) -> Callable[P, R]: ...
@overload
def shard_map(
    fun: None = None,
    /,
    *,
    out_specs: Any,
    in_specs: Any = Infer,
    mesh: Mesh | AbstractMesh | None = None,
    axis_names: Set[Hashable] = frozenset(),
    check_vma: bool = True,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def shard_map(
    fun: Callable[..., Any] | None = None,
    /,
    *,
    out_specs: Any,
    in_specs: Any = Infer,
    mesh: Mesh | AbstractMesh | None = None,
    axis_names: Set[Hashable] = frozenset(),
    check_vma: bool = True,
) -> Any:
    """``jax.shard_map`` over modules: ``fun`` runs once per shard, on the local blocks.

    ``in_specs`` is a prefix of the positional arguments (a tuple with one entry per
    argument, or one entry for all), ``out_specs`` a prefix of the output, as in JAX. An
    entry is a ``PartitionSpec``: in a module's (or any container's) place it applies to
    every array below; a tree shaped like the argument gives each array its own, e.g.
    ``pm.get_partition_spec(model)`` (one spec per Variable from its ``Partitioned``
    box, resolved through the active logical axis rules). ``None`` in ``in_specs``
    passes the arrays below unmapped, as constants (JAX's static inputs).
    ``in_specs=Infer`` (the default) reads every input's spec from its type (all mesh
    axes Explicit). ``mesh`` defaults to the one set with ``jax.set_mesh``;
    ``axis_names`` and ``check_vma`` are JAX's.

    Non-array leaves are static and modules come back as modules; a Variable shared by
    several places is one array, and its places must be given the same spec. Keyword
    arguments are not mapped (``jax.shard_map`` takes none): pass them positionally.

    A spec that does not fit the tree is a ``TransformError``, an input the mesh cannot
    split as asked (a mesh axis it lacks, more entries than the array has axes, an axis
    the mesh axes do not divide) a ``ShardingError``; both name the argument's path.
    """
    if fun is None:
        return functools.partial(
            shard_map,
            out_specs=out_specs,
            in_specs=in_specs,
            mesh=mesh,
            axis_names=axis_names,
            check_vma=check_vma,
        )
    require_callable(fun, "shard_map")
    fun_ = fun
    out_groups = _distinct_specs(out_specs)

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TransformError(
                f"shard_map: got keyword arguments {sorted(kwargs)}, but in_specs is a prefix "
                "of the positional arguments only (as in jax.shard_map); pass them "
                "positionally with an in_specs entry each, or close over them."
            )
        skel, arrays, _ = pack(args)
        infer = in_specs is Infer
        specs = [Infer] * len(arrays) if infer else _input_specs(args, skel, in_specs)
        if not infer:
            _check_inputs(mesh, skel, arrays, specs)
        mapped = [i for i, s in enumerate(specs) if s is not None]
        cell: dict[str, Any] = {}

        def body(local: list[Any]) -> tuple[dict[str, Any], ...]:
            full = list(arrays)
            for i, x in zip(mapped, local):
                full[i] = x
            out = fun_(*unpack(skel, full))
            oskel, oarrays, _ = pack(out)
            cell["out"] = oskel
            return _group_outputs(out, oskel, oarrays, out_specs, out_groups)

        jax_in = Infer if infer else ([specs[i] for i in mapped],)
        groups = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=jax_in,
            out_specs=tuple(out_groups),
            axis_names=axis_names,
            check_vma=check_vma,
        )([arrays[i] for i in mapped])
        by_index = {int(k.split(":", 1)[0]): x for g in groups for k, x in g.items()}
        return unpack(cell["out"], [by_index[i] for i in range(len(by_index))])

    return wrapper


def _is_spec_leaf(x: Any) -> bool:
    return x is None or isinstance(x, (PartitionSpec, Variable, AxisMetadata))


def _open_spec(x: Any, what: str, where: str) -> PartitionSpec | None:
    """A spec leaf's ``PartitionSpec`` (a Variable or box in the spec tree holds one)."""
    while isinstance(x, (Variable, AxisMetadata)):
        x = slot_value(x) if isinstance(x, Variable) else x.value
    if x is None or isinstance(x, PartitionSpec):
        return x
    raise TransformError(
        f"{what}: {x!r} at {where} is not a PartitionSpec; give a jax.sharding.PartitionSpec "
        "(P() for replicated) or None."
    )


def _distinct_specs(out_specs: Any) -> list[PartitionSpec]:
    """The distinct ``PartitionSpec``s in ``out_specs``: one output group each."""
    found: list[PartitionSpec] = []
    for path, leaf in jtu.tree_flatten_with_path(out_specs, is_leaf=_is_spec_leaf)[0]:
        spec = _open_spec(leaf, "shard_map out_specs", f"out_specs{format_path(path)}")
        if spec is not None and spec not in found:
            found.append(spec)
    return found


def _match(spec: Any, tree: Any, path: Path, what: str, root: str, out: list[Any]) -> None:
    """Append the spec of every leaf of ``tree`` (Variables and boxes are leaves), in
    flattening order: ``spec`` is a prefix of ``tree`` at ``path``."""
    if _is_spec_leaf(spec):
        s = _open_spec(spec, what, _describe(path, root))
        out.extend([s] * len(jtu.tree_leaves(tree, is_leaf=_is_slot_leaf)))
        return
    node = flatten_one_level(spec)
    empty = node is None and jtu.tree_structure(spec).num_leaves == 0  # (), [], {}
    if node is None and not empty:
        _open_spec(spec, what, _describe(path, root))  # raises: not a spec
    here = flatten_one_level(tree, is_leaf=_is_slot_leaf)
    keys = [key_of(k) for k, _ in node[0]] if node is not None else []
    tkeys = [key_of(k) for k, _ in here[0]] if here is not None else None
    if empty and type(spec) is type(tree) and not jtu.tree_leaves(tree, is_leaf=_is_slot_leaf):
        return
    if node is None or here is None or type(spec) is not type(tree) or keys != tkeys:
        has = f"a {type(tree).__name__}" + (f" with entries {tkeys}" if here is not None else "")
        raise TransformError(
            f"{what}: the spec at {_describe(path, root)} is a {type(spec).__name__} with "
            f"entries {keys}, but the tree there is {has}. Give a PartitionSpec there (it "
            "covers every array below) or a prefix with the tree's own entries."
        )
    for (k, s), (_, t) in zip(node[0], here[0]):
        _match(s, t, (*path, key_of(k)), what, root, out)


def _slot_specs(tree: Any, skel: Skeleton, spec: Any, what: str, root: str) -> dict[int, Any]:
    """The spec of every slot of ``tree`` (packed as ``skel``); the places of a shared
    Variable must agree."""
    flat: list[Any] = []
    _match(spec, tree, (), what, root, flat)
    out: dict[int, Any] = {}
    for leaf, s in zip(skel.structure.leaves, flat, strict=True):
        if type(leaf) is not _Hole:
            continue
        slot = leaf.index
        first = skel.structure.alias[slot]
        if first is None:
            out[slot] = s
        elif out[first] != s:
            raise TransformError(
                f"{what}: {_describe(skel.path(first), root)} and "
                f"{_describe(skel.path(slot), root)} are the same Variable (shared), but get "
                f"different specs ({out[first]!r} and {s!r}). Give every place of a shared "
                "Variable the same spec."
            )
    return out


def _input_specs(args: tuple[Any, ...], skel: Skeleton, in_specs: Any) -> list[Any]:
    """The spec of every input array (``None``: passed unmapped)."""
    what = "shard_map in_specs"
    if isinstance(in_specs, list):
        in_specs = tuple(in_specs)
    if isinstance(in_specs, tuple) and not isinstance(in_specs, PartitionSpec):
        if len(in_specs) != len(args):
            raise TransformError(
                f"{what} has {len(in_specs)} entries but the function got {len(args)} "
                "positional arguments; give one entry per argument (or one PartitionSpec "
                "for all of them)."
            )
    by_slot = _slot_specs(args, skel, in_specs, what, "*args")
    return [by_slot[s] for s in skel.array_slots()]


def _check_inputs(
    mesh: Mesh | AbstractMesh | None, skel: Skeleton, arrays: list[Any], specs: list[Any]
) -> None:
    """Every mapped input fits its spec on the mesh: the mesh has the axes, the array has
    the axes, and the mesh axes divide them (``ShardingError`` naming the input)."""
    chosen = mesh if mesh is not None else context_mesh()
    if chosen is None:
        raise ShardingError(
            "shard_map: no mesh: pass mesh=... or set one with `with jax.set_mesh(mesh):`."
        )
    slots = skel.array_slots()
    for x, spec, slot in zip(arrays, specs, slots):
        if spec is None:
            continue
        where = f"shard_map in_specs at {_describe(skel.path(slot), '*args')}: "
        _check_fits(x, named_sharding(chosen, spec, where), where)


def _group_outputs(
    out: Any, skel: Skeleton, arrays: list[Any], specs: Any, groups: list[PartitionSpec]
) -> tuple[dict[str, Any], ...]:
    """The output arrays as one dict per spec of ``groups``, keyed by index and path."""
    what = "shard_map out_specs"
    by_slot = _slot_specs(out, skel, specs, what, "output")
    grouped: tuple[dict[str, Any], ...] = tuple({} for _ in groups)
    for i, (x, slot) in enumerate(zip(arrays, skel.array_slots())):
        spec = by_slot[slot]
        where = _describe(skel.path(slot), "output")
        if spec is None:
            raise TransformError(
                f"{what}: None at {where}, which is an array; give it a PartitionSpec (P() "
                "if every shard returns the same value)."
            )
        # Single quotes only: JAX's repr of the key then shows the path unescaped.
        grouped[groups.index(spec)][f"{i}:{where}".replace('"', "'")] = x
    return grouped
