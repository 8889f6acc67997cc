"""``nnx.shard_map``: ``pm.shard_map`` plus the lower/raise/finish steps of ``extract``.

The graph nodes among the arguments cross the boundary as ``NodeSlot``s (their
Variables); the specs become a prefix of those slots (``to_jax_prefix``: a
``StateSharding`` gives one spec per filter group, an ``nnx.prefix`` tree one per
Variable). The function runs on objects rebuilt from the local blocks, and the Variables
come back, each with its input's spec, to be written into the caller's.

``pm.shard_map`` maps the arrays; the Variables cross it as their raw values, their
pytree definition (an NNX Variable's metadata lives there) kept aside and put back on
each side, since ``pm`` rebuilds a Variable from its type alone (``general.flat_leaves``
does the same for the other transforms; here the tree keeps its shape, so that the specs
stay a prefix of it).
"""

import functools
from collections.abc import Callable, Hashable, Set
from typing import Any

import jax

import pytreemod as pm

from .. import extract
from ..extract import NodeSlot, TreeState
from ..statelib import to_flat_state
from ..variablelib import Variable
from .compilation import StateSharding, _follow, _is_prefix_leaf, prefix_hooks, to_jax_prefix
from .general import raise_bound_method_error, resolve_bound_callable, trace_numbers


def shard_map(
    f: Any = extract.Missing,
    *,
    mesh: Any,
    in_specs: Any,
    out_specs: Any,
    axis_names: Set[Hashable] = frozenset(),
    check_vma: bool = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.shard_map`` over functions of Modules: ``in_specs`` take ``StateSharding``
    (graph updates) and ``nnx.prefix`` trees in a node's place; the Variables the function
    changes come back with their input's spec."""
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if f is extract.Missing:
        return functools.partial(
            shard_map,
            mesh=mesh,
            in_specs=in_specs,
            out_specs=out_specs,
            axis_names=axis_names,
            check_vma=check_vma,
            graph=graph,
            graph_updates=updates,
        )
    fun, _, was_bound = resolve_bound_callable(f)
    if was_bound:
        raise_bound_method_error("shard_map")
    extract.check_prefix(in_specs, "in_specs", "shard_map", graph, updates)
    extract.check_prefix(out_specs, "out_specs", "shard_map", graph, updates)
    head = jax.sharding.PartitionSpec()
    pm_in_specs = to_jax_prefix(in_specs, head)
    pm_out_specs = to_jax_prefix(out_specs, head)
    groups = any(
        isinstance(x, StateSharding) for x in jax.tree.leaves(in_specs, is_leaf=_is_prefix_leaf)
    )

    @functools.wraps(fun)
    def wrapper(*args: Any) -> Any:
        node_prefix = _arg_node_prefixes(in_specs, args) if groups else None
        group, n_groups, meta = prefix_hooks(node_prefix)

        if in_specs is not None:
            extract.check_prefix_aliasing(
                args, tuple(in_specs) if isinstance(in_specs, list) else in_specs
            )
        pargs, lowered = extract.lower(
            args,
            graph=graph,
            graph_updates=updates,
            name="shard_map",
            keep_all=lambda _: True,
            group=group if groups else None,
            n_groups=n_groups if groups else None,
            meta=meta if groups else None,
        )
        specs = _leaf_specs(lowered, pargs, in_specs, args)
        variable_specs = [s for s, leaf in zip(specs, lowered.leaves) if isinstance(leaf, Variable)]
        indices = tuple(i for i, leaf in enumerate(lowered.leaves) if isinstance(leaf, Variable))
        update_specs = extract.Updates(indices, variable_specs)
        raw_args, args_def = _strip(pargs)
        cell: dict[str, Any] = {}

        def pure(*raw: Any) -> Any:
            a, raised = extract.raise_inputs(
                _dress(args_def, raw), graph=graph, graph_updates=updates, name="shard_map"
            )
            result, cell["out"] = _strip(raised.lower_outputs(fun(*a)))
            return result

        mapped = pm.shard_map(
            pure,
            mesh=mesh,
            in_specs=pm_in_specs,
            out_specs=(update_specs, pm_out_specs),
            axis_names=axis_names,
            check_vma=check_vma,
        )
        raw_out = mapped(*raw_args)
        changes, out = _dress(cell["out"], raw_out)
        return lowered.finish(changes, out)

    return wrapper


def _is_variable(x: Any) -> bool:
    return isinstance(x, Variable)


def _strip(tree: Any) -> tuple[Any, Any]:
    """``tree`` with each Variable replaced by its raw value and Python numbers made
    arrays (JAX traces them, as ``jax.shard_map`` did), and ``tree``'s pytree definition
    (the Variables' metadata included) to dress the result again."""
    raw = jax.tree.map(
        lambda x: x.get_raw_value() if _is_variable(x) else x, tree, is_leaf=_is_variable
    )
    return trace_numbers(raw), jax.tree.structure(tree)


def _dress(treedef: Any, raw: Any) -> Any:
    """Inverse of ``_strip``: a Variable's only child is its raw value, so ``raw`` has the
    leaves of the tree ``treedef`` was taken from, in the same order."""
    return jax.tree.unflatten(treedef, jax.tree.leaves(raw))


def _leaf_specs(lowered: Any, pargs: Any, in_specs: Any, args: tuple[Any, ...]) -> list[Any]:
    """The spec of each leaf of the joint state, from the slot (and its prefix) that
    carries it: the out spec of that Variable's update."""
    by_path: dict[Any, Any] = {}
    specs = in_specs if isinstance(in_specs, (tuple, list)) else (in_specs,) * len(args)
    for i, (arg, spec) in enumerate(zip(args, specs)):
        flat = extract.broadcast_prefix(
            spec, arg, prefix_is_leaf=lambda x: x is None or _is_prefix_leaf(x)
        )
        for slot, p in zip(_slots_of(jax.tree.leaves(pargs[i], is_leaf=extract.is_slot)), flat):
            for g, paths in enumerate(slot.info.paths):
                for j, path in enumerate(paths):
                    by_path[(slot.info.index, *path)] = _spec_for(p, g, j, path)
    return [by_path.get(path) for path in lowered.paths]


def _slots_of(leaves: list[Any]) -> list[NodeSlot]:
    return [x for x in leaves if isinstance(x, NodeSlot)]


def _spec_for(prefix: Any, group: int, j: int, path: Any) -> Any:
    if isinstance(prefix, StateSharding):
        return prefix.shardings[group]
    if isinstance(prefix, TreeState):
        return dict(to_flat_state(prefix.state)).get(tuple(path))
    if extract.is_node_leaf(prefix):
        return jax.tree.leaves(prefix)[j]
    return prefix


def _arg_node_prefixes(in_specs: Any, args: tuple[Any, ...]) -> Callable[[Any], Any]:
    specs = in_specs if isinstance(in_specs, (tuple, list)) else (in_specs,) * len(args)

    def lookup(keypath: Any) -> Any:
        i = keypath[0].idx
        arg = args[i]
        flat = extract.broadcast_prefix(
            specs[i], arg, prefix_is_leaf=lambda x: x is None or _is_prefix_leaf(x)
        )
        target = _follow(arg, keypath[1:])
        for leaf, p in zip(jax.tree_util.tree_leaves(arg, is_leaf=extract.is_node_leaf), flat):
            if leaf is target:
                return p
        return None

    return lookup
