"""``nnx.jit``'s fast path: a call plan remembered from one full lowering.

A full ``nnx.jit`` call walks the object graphs of its arguments (``extract.lower``: a
joint ``graphlib.split``), builds a ``NodeSlot`` per graph node whose static part holds
the GraphDef, lets ``jax.jit`` hash and compare that static part, and writes the
changed Variables back. For a small model the walk and the comparison cost several
times the compiled computation. A ``Plan`` keeps what the walk found for one set of
argument objects: the caller's Variables in the order the slots carry them, and a
``PlanKey`` (the slots' static parts, hashed once). While nothing structural has changed
(``_structure``'s epoch, the snapshots of plain containers, the identity of the node
arguments, the JAX trace), a call reads the Variables' raw values into two flat lists
(donated, kept), calls a second ``jax.jit`` of the same pure function whose static
argument is the ``PlanKey``, and writes the changed values back by index. The traced
function is the full path's (the key rebuilds the very slots the full path passes), so
both paths compute the same thing; the fast one skips only the walk and the hashing.

A plan is built from a full call that changed no structure (no graph update, no
replaced non-Variable leaf) and whose arguments are graph nodes only at the top level
(and not Variables, ``ref``/``hijax`` Variables or ``jax.Ref``s inside, shardings or
graph contexts); anything else takes the full path, as does every call after a
structural change until the next plan. A plan's call is one closure (``_plan_call``)
holding everything it checks and reads in cells: it is the whole Python cost of a
fast call. No graph context may be open in the calling thread (nor a static cache
offered): while none is open in any thread, one number says so (``_structure``'s
``ready``). The commonest call, ``f(node, x)`` (``Plan.pair``), is served by
``nnx.jit``'s own call from the tuple ``Plan.inline`` of the plan that served the call
before (one Python frame in all; ``PlanCache.inline``, cleared whenever a plan is added
or dropped). That call keeps the list of values it read for the next one while no
Variable's value is written anywhere (``_structure.written`` empties it).

Each structure has its own fast ``jax.jit`` (``fast_pure`` with the ``PlanKey``'s
number bound), so a fast call passes JAX only the value lists and the other arguments;
the commonest call's is called ``(kept, x)`` (``fast_pair``).

Both jitted functions return ``jax.Ref``s as Flax does (``refs_out``/``refs_in``): JAX
refuses them as results, so they cross as markers.
"""

import dataclasses
import operator
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.core
import numpy as np
from jax.ref import AbstractRef

from ...errors import TraceContextError
from .. import _structure, extract, graphlib, tracers
from ..extract import Lowered, NodeSlot, SlotInfo
from ..pytreelib import Pytree, PytreeState
from ..statelib import State
from ..variablelib import Variable, is_array_ref

_Tracer = jax.core.Tracer
COUNTER = _structure.COUNTER
_GRAPH_CONTEXT = graphlib.GRAPH_CONTEXT
MISS = object()  # Plan.call: the plan does not apply
raw_of = operator.attrgetter("_raw_value")  # a Variable's (or _Const's) value
# Write a Variable's value: its slot's own setter (what object.__setattr__ finds after a
# lookup by name); ``changed`` only names Variables (a replaced non-Variable leaf
# comes back as a full ``Updates``).
_set_raw = Variable.__dict__["_raw_value"].__set__
_MAX_PLANS = 4
_MAX_WASTED = 4
# Leaf types a plan's call takes as they are (no graph node can hide in them). JAX's
# concrete array type joins on the first plan built (asking for it at import would start
# JAX's backend, after which e.g. ``jax_num_cpu_devices`` can no longer be set).
FAST_LEAF_TYPES: set[type] = {np.ndarray, int, float, bool, complex, type(None)}


class _Const:
    """A non-Variable leaf of the joint state (an array attribute): read like a Variable."""

    __slots__ = ("_raw_value",)

    def __init__(self, value: Any) -> None:
        self._raw_value = value


class PlanKey:
    """The static argument of the fast ``jax.jit``: where the node arguments go and how
    to rebuild their slots from the flat value lists (hashed once, compared by identity
    first)."""

    __slots__ = ("_hash", "positions", "slots")

    def __init__(
        self,
        positions: tuple[int, ...],
        slots: tuple[tuple[SlotInfo, bool, tuple[tuple[Any, ...], ...]], ...],
    ) -> None:
        self.positions = positions
        self.slots = slots  # per slot: info, donated, per group the builders of its leaves
        self._hash = hash((positions, slots))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, PlanKey)
            and self._hash == other._hash
            and self.positions == other.positions
            and self.slots == other.slots
        )

    def rebuild(self, donated: list[Any], kept: list[Any]) -> list[NodeSlot]:
        """The slots the full path would pass, from the traced value lists."""
        sources = (iter(kept), iter(donated))
        out = []
        for info, is_donated, groups in self.slots:
            values = sources[is_donated]
            out.append(
                NodeSlot(
                    info,
                    tuple(tuple(_build(b, next(values)) for b in group) for group in groups),
                )
            )
        return out


def _build(builder: Any, value: Any) -> Any:
    return value if builder is None else builder.unflatten([value])


# Each structure gets a number, and an ``nnx.jit`` function one fast ``jax.jit`` per
# number (``fast_pure`` with the number bound): equal keys (the same structure met again,
# e.g. after a change that was undone) share a number, so they share the compiled
# function, and a fast call passes only the value lists and the other arguments (no
# static argument for JAX to hash). The registry keeps every structure seen (small: slot
# layouts and GraphDefs, no arrays).
_KEY_NUMBERS: dict[PlanKey, int] = {}
_KEYS: list[PlanKey] = []


def key_number(key: PlanKey) -> int:
    number = _KEY_NUMBERS.get(key)
    if number is None:
        number = _KEY_NUMBERS[key] = len(_KEYS)
        _KEYS.append(key)
    return number


def fast_pure(pure: Callable[..., Any], number: int) -> Callable[..., Any]:
    """The function the fast ``jax.jit`` of ``number`` traces: ``pure`` on the slots
    rebuilt from the value lists (donated, kept).

    Its result is shaped for JAX's C++ pytree code (no Python-registered node in the
    common case): ``(out,)`` when no Variable changed and the output holds no graph
    node, else ``(changed, updates, out, lowered_out)`` where ``changed`` maps joint
    indices to the new raw values of the Variables that changed, ``updates`` is the full
    path's ``Updates`` only when the structure changed (else None), and the output is
    ``out`` when it holds no graph node, else ``lowered_out`` (its nodes as slots)."""
    key = _KEYS[number]

    def run(donated: list[Any], kept: list[Any], *args: Any, **kwargs: Any) -> Any:
        full = list(args)
        for position, slot in zip(key.positions, key.rebuild(donated, kept)):
            full[position] = slot
        updates, out = pure(*full, **kwargs)
        result = refs_out((updates, out), (donated, kept, args, kwargs))
        if len(result) == 3:
            return _with_refs(result)
        has_slots = any(
            isinstance(x, NodeSlot) for x in jax.tree_util.tree_leaves(out, is_leaf=extract.is_slot)
        )
        plain, slotted = (None, out) if has_slots else (out, None)
        if updates.joint is None and not updates.raw_paths:
            if not updates.indices and not has_slots:
                return (out,)  # the common forward call: nothing to write back
            return dict(zip(updates.indices, updates.values)), None, plain, slotted
        return {}, updates, plain, slotted

    return run


def fast_pair(pure: Callable[..., Any], number: int, pair: int) -> Callable[..., Any]:
    """``fast_pure`` of a ``Plan.pair`` call ``f(node, x)``, called ``(kept, x)``: the
    fewest arguments for JAX to take apart on the commonest call."""
    run = fast_pure(pure, number)
    if pair == 1:
        return lambda kept, x: run([], kept, None, x)
    return lambda kept, x: run([], kept, x, None)


def _with_refs(result: tuple[Any, Any, bool]) -> tuple[Any, ...]:
    """The fast function's result when it holds ``jax.Ref``s: the full path's ``Updates``
    (``refs_in`` restores the Refs, ``Plan.finish`` writes them back)."""
    updates, out, marked = result
    return {}, updates, None, out, marked


# ------------------------------------------------------------------ returned jax.Refs
# JAX refuses a mutable array (``jax.Ref``) among a jitted function's results. NNX
# returns them anyway: a Ref that came in as an argument goes back as a static marker
# naming its place among the argument leaves (the caller gets its own Ref back, already
# written in place by JAX); a Ref made inside goes back as its value, and the caller gets
# a new Ref holding it. A result with markers gains a last element (True), so the common
# case (no Ref) costs one length check outside; ``refs_in`` drops it and restores the Refs.


class _InputRef:
    """Stands for the argument leaf ``k`` (a ``jax.Ref``) among the results."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k


class _NewRef:
    """The value of a ``jax.Ref`` created inside the function (a new Ref outside)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


jax.tree_util.register_pytree_node(_InputRef, lambda r: ((), r.k), lambda k, _: _InputRef(k))
jax.tree_util.register_pytree_node(
    _NewRef, lambda r: ((r.value,), None), lambda _, ch: _NewRef(ch[0])
)


def _ref_positions(leaves: list[Any]) -> list[int]:
    """Where ``jax.Ref``s (traced or concrete) are among ``leaves``: one inline test per
    leaf, no Python call (this runs on every trace's results)."""
    return [
        i
        for i, x in enumerate(leaves)
        if (isinstance(x.aval, AbstractRef) if isinstance(x, _Tracer) else type(x) is jax.Ref)
    ]


def refs_out(result: Any, inputs: Any) -> Any:
    """Inside the trace: ``result`` with its ``jax.Ref`` leaves replaced (see above)."""
    leaves, treedef = jax.tree_util.tree_flatten(result)
    positions = _ref_positions(leaves)
    if not positions:
        return result
    ins = jax.tree_util.tree_leaves(inputs)
    where = {id(ins[k]): k for k in _ref_positions(ins)}
    for i in positions:
        leaf = leaves[i]
        k = where.get(id(leaf))
        leaves[i] = _NewRef(leaf[...]) if k is None else _InputRef(k)
    return (*jax.tree_util.tree_unflatten(treedef, leaves), True)


def _is_marker(x: Any) -> bool:
    return isinstance(x, (_InputRef, _NewRef))


def refs_in(result: Any, inputs: Any) -> Any:
    """Outside: the results with the markers of ``refs_out`` replaced by Refs."""
    if len(result) == 2:
        return result
    args = jax.tree_util.tree_leaves(inputs)

    def restore(x: Any) -> Any:
        if isinstance(x, _InputRef):
            return args[x.k]
        if isinstance(x, _NewRef):
            abstract = isinstance(x.value, jax.ShapeDtypeStruct)  # eval_shape
            return x.value if abstract else jax.new_ref(x.value)
        return x

    return jax.tree.map(restore, result[:-1], is_leaf=_is_marker)


def _has_nodes(x: Any) -> bool:
    return any(
        extract.is_node_leaf(leaf)
        for leaf in jax.tree_util.tree_leaves(x, is_leaf=extract.is_node_leaf)
    )


def plain(x: Any) -> bool:
    return type(x) in FAST_LEAF_TYPES or not _has_nodes(x)


@dataclasses.dataclass(eq=False)
class Plan:
    """One remembered lowering (see the module docstring)."""

    key: PlanKey
    number: int  # key_number(key): names the fast jit of this structure
    n_args: int
    kw_names: tuple[str, ...]
    refs: tuple[tuple[int, "weakref.ref[Any]"], ...]
    # (position, id) of each node argument: an id cannot be reused while the plan lives
    # (the node's finalizer drops the plan when the node dies, before its id is free).
    ids: tuple[tuple[int, int], ...]
    others: tuple[int, ...]  # dynamic positions holding no node
    donated: list[Any]  # Variables (or _Const) read into the donated list
    kept: list[Any]
    leaves: list[Any]  # the joint state's leaves (Updates index into it)
    paths: list[Any]
    snapshots: list[tuple[Any, Any, tuple[Any, ...]]]
    epoch: int
    token: Any  # the JAX trace the plan was built under
    modes: tuple[bool, bool]  # (graph, graph_updates)
    # call(full, kwargs): the result, or MISS where the plan does not apply (``bind``).
    call: Callable[[tuple[Any, ...], dict[str, Any]], Any] = lambda full, kwargs: MISS
    jitted: Any = None  # the fast jit, called (donated, kept, *args, **kwargs)
    # built outside every JAX trace (its first call's results were concrete): a later
    # call whose results are concrete runs there too, so its writes need no trace check
    top: bool = False
    inline: tuple[Any, ...] | None = None
    finalizers: list[Any] = dataclasses.field(default_factory=list)

    @property
    def pair(self) -> int | None:
        """The other argument's position where the call is ``f(node, x)`` with nothing
        donated and no plain container to compare (the commonest call), else None."""
        if len(self.ids) != 1 or self.n_args != 2 or self.kw_names:
            return None
        ((node_position, _),) = self.ids
        if self.others != (1 - node_position,) or self.snapshots or self.donated:
            return None
        return 1 - node_position

    def bind(self, jitted: Any, pair: int | None = None) -> None:
        """Make ``call`` this plan's call of ``jitted`` (see ``_plan_call``); with
        ``pair`` (this plan's ``pair``), ``jitted`` is ``fast_pair``'s jit, and
        ``inline`` is what ``nnx.jit``'s own call needs to serve the call itself."""
        self.inline = None
        if pair is None:
            self.jitted = jitted
        else:
            ((node_position, node_id),) = self.ids
            self.jitted = _as_general(jitted, pair)
            self.inline = (
                node_id,
                self.epoch,
                node_position,
                self.kept,
                [],  # the values read from ``kept`` while none is replaced (_structure)
                jitted,
                self,
            )
        self.call = _plan_call(self, self.jitted)

    def release(self) -> None:
        """Drop the values the one-frame call kept (the plan is gone: they must not keep
        the model's arrays alive)."""
        if self.inline is not None:
            self.inline[4].clear()

    def run(self, full: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args = list(full)
        for position in self.key.positions:
            args[position] = None
        donated = [s._raw_value for s in self.donated] if self.donated else []
        kept = [s._raw_value for s in self.kept]
        result = self.jitted(donated, kept, *args, **kwargs)
        leaves = jax.tree_util.tree_leaves(result)
        self.top = bool(leaves) and not any(isinstance(x, _Tracer) for x in leaves)
        if len(result) == 1:
            return result[0]
        if len(result) == 5:  # jax.Refs among the results (see refs_out)
            result = refs_in(result, (donated, kept, args, kwargs))
        return self.finish(full, *result)

    def finish(
        self, full: tuple[Any, ...], changed: dict[int, Any], updates: Any, plain: Any, slotted: Any
    ) -> Any:
        """Write the call's changes back and rebuild its output."""
        if updates is None:
            if changed:
                leaves = self.leaves
                concrete = self.top and not isinstance(next(iter(changed.values())), _Tracer)
                if not concrete and tracers.current_jax_trace() != self.token:
                    # Values traced under another trace would leak into the caller's Variables.
                    raise TraceContextError(
                        f"Cannot mutate {type(leaves[next(iter(changed))]).__name__} "
                        "from a different trace level"
                    )
                for i, value in changed.items():
                    _set_raw(leaves[i], value)
                _structure.written()
            return plain if slotted is None else extract.raise_outputs(slotted)
        nodes = tuple(full[p] for p in self.key.positions)
        lowered = Lowered(nodes, self.leaves, self.paths, self.modes[0], self.modes[1], "jit")
        return lowered.finish(updates, plain if slotted is None else slotted)


def _plan_call(plan: Plan, jitted: Any) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    """The fast call of ``plan``: one closure whose checks and reads use cells, not
    attribute lookups (this function is the whole Python cost of a fast call)."""
    n_args, epoch, ids, others = plan.n_args, plan.epoch, plan.ids, plan.others
    kw_names, snapshots, positions = plan.kw_names, plan.snapshots, plan.key.positions
    donated_vars, kept_vars = plan.donated, plan.kept
    counter, fast_types, finish = COUNTER, FAST_LEAF_TYPES, plan.finish

    def call(full: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if len(full) != n_args or counter.epoch != epoch:
            return MISS
        for position, node_id in ids:
            if id(full[position]) != node_id:
                return MISS
        for position in others:
            if type(full[position]) not in fast_types and _has_nodes(full[position]):
                return MISS
        if (kwargs or kw_names) and (
            tuple(sorted(kwargs)) != kw_names or not all(map(plain, kwargs.values()))
        ):
            return MISS
        if snapshots and not all(_signature(n, impl) == sig for n, impl, sig in snapshots):
            return MISS
        if counter.ready != epoch and not _context_free():
            return MISS
        args = list(full)
        for position in positions:
            args[position] = None
        donated = list(map(raw_of, donated_vars))
        kept = list(map(raw_of, kept_vars))
        result = jitted(donated, kept, *args, **kwargs)
        if len(result) == 1:
            return result[0]
        if len(result) == 5:  # jax.Refs among the results (see refs_out)
            return finish(full, *refs_in(result, (donated, kept, args, kwargs)))
        return finish(full, *result)

    if len(ids) != 1 or kw_names or snapshots or donated_vars:
        return call
    general = call
    ((node_position, node_id),) = ids
    if n_args == 2:
        other = 1 - node_position
    else:
        other = -1

    # The common call (one node argument, no keywords, nothing donated, no plain
    # container to compare) with no graph context open anywhere: the same checks,
    # unrolled; with two arguments the call is spelled out (no list of arguments built).
    def simple(full: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kwargs or counter.ready != epoch:
            return general(full, kwargs)
        if len(full) != n_args or id(full[node_position]) != node_id:
            return MISS
        for position in others:
            if type(full[position]) not in fast_types and _has_nodes(full[position]):
                return MISS
        kept = list(map(raw_of, kept_vars))
        if other == 1:
            args: Any = (None, full[1])
        elif other == 0:
            args = (full[0], None)
        else:
            args = list(full)
            args[node_position] = None
        result = jitted([], kept, *args)
        if len(result) == 1:
            return result[0]
        if len(result) == 5:  # jax.Refs among the results (see refs_out)
            return finish(full, *refs_in(result, ([], kept, args, kwargs)))
        return finish(full, *result)

    return simple


def _context_free() -> bool:
    """No graph context is open in this thread (other threads' may be); a static cache
    offered by cached_partial is taken (the plan serves the call the offer was for)."""
    ctx = _GRAPH_CONTEXT
    if ctx.update_context_stacks or ctx.ref_index_stack or ctx.index_ref_stack:
        return False
    if ctx.offer is not None:
        ctx.tmp_static_cache = None
    return True


def _as_general(jitted: Any, pair: int) -> Callable[..., Any]:
    """``fast_pair``'s jit called the general way: (donated, kept, *args)."""
    if pair == 1:
        return lambda donated, kept, node, x: jitted(kept, x)
    return lambda donated, kept, x, node: jitted(kept, x)


def _signature(node: Any, impl: Any) -> tuple[Any, ...]:
    return tuple((k, id(v)) for k, v in impl.node_dict(node).items())


def _walk(nodes: tuple[Any, ...]) -> tuple[list[Any], list[Any]] | None:
    """The objects to watch and the snapshots of plain containers under
    ``nodes``; None if a Variable there cannot take the fast path (ref/hijax)."""
    watched: list[Any] = []
    snapshots: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(n, False) for n in nodes]
    while stack:
        node, owned = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Variable):
            if node.get_metadata("ref", False) or node.get_metadata("hijax", False):
                return None
            continue
        impl = graphlib.get_node_impl(node)
        if impl is None:
            continue
        if isinstance(node, Pytree):
            watched.append(node)
        elif isinstance(node, State):
            owned = True  # its entries change through State's own (hooked) methods
        elif not (owned or node is None or isinstance(node, (tuple, PytreeState))):
            snapshots.append((node, impl, _signature(node, impl)))
        stack.extend((child, owned) for child in impl.node_dict(node).values())
    return watched, snapshots


def build_plan(
    full: tuple[Any, ...],
    kwargs: dict[str, Any],
    pargs: tuple[Any, ...],
    lowered: Lowered,
    static: set[int],
    epoch: int,
    token: Any,
) -> Plan | None:
    """A plan from one full lowering (``pargs``: the lowered positional arguments), or
    None where the call cannot take the fast path."""
    positions: list[int] = []
    others: list[int] = []
    for i, (arg, low) in enumerate(zip(full, pargs)):
        if i in static:
            continue
        if isinstance(low, NodeSlot):
            if isinstance(arg, Variable) or low.meta is not None:
                return None
            positions.append(i)
        elif not plain(arg):
            return None
        else:
            others.append(i)
    if not all(map(plain, kwargs.values())):
        return None
    walked = _walk(lowered.nodes)
    if walked is None:
        return None
    watched, snapshots = walked
    position_of = {id(v): j for j, v in enumerate(lowered.leaves)}
    donated: list[Any] = []
    kept: list[Any] = []
    specs = []
    for i in positions:
        slot: NodeSlot = pargs[i]
        is_donated = slot.info.keep_all
        target = donated if is_donated else kept
        groups = []
        for group in slot.groups:
            builders = []
            for leaf in group:
                if isinstance(leaf, Variable):
                    if not leaf._trace_state.is_valid():
                        return None
                    builders.append(jax.tree_util.tree_structure(leaf, is_leaf=_below(leaf)))
                    target.append(leaf)
                else:
                    if is_donated:
                        return None  # a donated array attribute would not come back
                    builders.append(None)
                    target.append(_Const(leaf))
                if id(leaf) not in position_of:
                    return None
            groups.append(tuple(builders))
        specs.append((slot.info, is_donated, tuple(groups)))
    if len(donated) + len(kept) != len(lowered.leaves):
        return None
    # Under another transform's trace the objects are that trace's (rebuilt on every
    # trace): a plan would never be reused, and would count against building others.
    values = [s._raw_value for s in (*donated, *kept)] + [full[i] for i in others]
    leaves = jax.tree_util.tree_leaves(values)
    if any(isinstance(v, jax.core.Tracer) or is_array_ref(v) for v in leaves):
        return None  # (a jax.Ref among the values: the full path returns Refs)
    FAST_LEAF_TYPES.update(type(v) for v in leaves if isinstance(v, jax.Array))
    try:
        refs = tuple((i, weakref.ref(full[i])) for i in positions)
    except TypeError:
        return None
    if not _structure.watch(watched):
        return None
    key = PlanKey(tuple(positions), tuple(specs))
    return Plan(
        key=key,
        number=key_number(key),
        n_args=len(full),
        kw_names=tuple(sorted(kwargs)),
        refs=refs,
        ids=tuple((i, id(full[i])) for i in positions),
        others=tuple(others),
        donated=donated,
        kept=kept,
        leaves=lowered.leaves,
        paths=lowered.paths,
        snapshots=snapshots,
        epoch=epoch,
        token=token,
        modes=(lowered.graph, lowered.graph_updates),
    )


def _below(root: Any) -> Callable[[Any], bool]:
    return lambda x: x is not root


class PlanCache:
    """The plans of one ``nnx.jit`` function: a few, newest first; a plan whose node
    argument dies is dropped. Building stops after ``_MAX_WASTED`` plans that no call
    reused (a caller that changes structure on every call)."""

    def __init__(self) -> None:
        self.plans: list[Plan] = []
        self.calls: list[Callable[..., Any]] = []  # each plan's ``call``, in order
        self.wasted = 0
        self.last_used = True
        # The plan that served the last call, in the form nnx.jit's own call reads
        # (Plan.inline), or None: cleared whenever a plan is added or dropped.
        self.inline: tuple[Any, ...] | None = None

    def __del__(self) -> None:
        # the jitted function is gone: its plans' kept values go with it
        for plan in self.plans:
            plan.release()

    @property
    def enabled(self) -> bool:
        return self.wasted < _MAX_WASTED

    def discard(self) -> None:
        """A plan was built for a call that changed structure: it cannot be reused."""
        self.wasted += 1

    def add(self, plan: Plan) -> None:
        if not self.last_used:
            self.wasted += 1
        self.last_used = False
        kept, dropped = [], []
        for p in self.plans:
            same_nodes = [r() for _, r in p.refs] == [r() for _, r in plan.refs]
            (dropped if same_nodes or len(kept) >= _MAX_PLANS - 1 else kept).append(p)
        for p in dropped:
            p.release()
            for f in p.finalizers:
                f.detach()
        self.plans = [plan, *kept]
        self.calls = [p.call for p in self.plans]
        self.inline = None
        plan.finalizers = [
            weakref.finalize(ref(), _drop, weakref.ref(self), weakref.ref(plan))
            for _, ref in plan.refs
        ]


def _drop(cache_ref: "weakref.ref[PlanCache]", plan_ref: "weakref.ref[Plan]") -> None:
    cache, plan = cache_ref(), plan_ref()
    if plan is not None:
        plan.release()
    if cache is not None and plan is not None and plan in cache.plans:
        cache.plans.remove(plan)
        cache.calls = [p.call for p in cache.plans]
        cache.inline = None
