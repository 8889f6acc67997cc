"""``nnx.jit``, ``nnx.jit_partial``, ``nnx.shard_map`` and ``StateSharding``.

Each is a JAX transform of a pure function plus the lower/raise/finish steps of
``extract``: the graph nodes among the arguments cross the boundary as ``NodeSlot``s
(their Variables), the function runs on rebuilt objects, and the Variables it changed are
written back into the caller's. ``nnx.jit`` compiles with ``pm.jit(trace="all")``:
NNX's jit follows ``jax.jit``'s rule for arguments (Python scalars traced, shardings,
``static_argnums`` and ``donate_argnames`` as ``jax.jit`` takes them), and ``pm.jit``'s
``"all"`` mode is that rule.
"""

import functools
import inspect
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, TypeVar

import jax

import pytreemod as pm

from .. import _structure, extract, filterlib, graphlib, tracers
from ..extract import NodeSlot, PrefixMapping, TreeState
from ..statelib import State, to_flat_state
from ..variablelib import Variable
from ._jit_plan import (
    COUNTER,
    FAST_LEAF_TYPES,
    MISS,
    PlanCache,
    build_plan,
    fast_pair,
    fast_pure,
    plain,
    raw_of,
    refs_in,
    refs_out,
)
from .general import raise_bound_method_error, resolve_bound_callable

P = ParamSpec("P")
R = TypeVar("R")


class StateSharding(PrefixMapping):
    """A sharding per filter for one node's state, used in ``in_shardings``/``out_shardings``."""

    def __init__(self, filter_sharding: Mapping[Any, Any] | Iterable[tuple[Any, Any]], /) -> None:
        if isinstance(filter_sharding, State):
            filter_sharding = [(_PathIs(p), v) for p, v in to_flat_state(filter_sharding)]
        items = tuple(
            filter_sharding.items() if isinstance(filter_sharding, Mapping) else filter_sharding
        )
        self._filters = tuple(f for f, _ in items)
        self._shardings = tuple(s for _, s in items)

    @property
    def filters(self) -> tuple[Any, ...]:
        return self._filters

    @property
    def shardings(self) -> tuple[Any, ...]:
        return self._shardings

    def map_prefix(self, path: tuple[Any, ...], variable: Variable) -> Any:
        for f, sharding in zip(self._filters, self._shardings):
            if filterlib.to_predicate(f)(path, variable):
                return sharding
        raise ValueError(f"No axis found for {path=}, {variable=}")

    def group(self, path: tuple[Any, ...], leaf: Any) -> int:
        for i, f in enumerate(self._filters):
            if filterlib.to_predicate(f)(path, leaf):
                return i
        raise ValueError(f"No axis found for {path=}, variable={leaf!r}")

    def __repr__(self) -> str:
        return f"StateSharding({dict(zip(self._filters, self._shardings))})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StateSharding)
            and self._filters == other._filters
            and self._shardings == other._shardings
        )

    def __hash__(self) -> int:
        return hash((self._filters, self._shardings))


class _PathIs:
    """The filter of one exact state path (a ``StateSharding`` built from a ``State``)."""

    def __init__(self, path: tuple[Any, ...]) -> None:
        self.path = tuple(path)

    def __call__(self, path: tuple[Any, ...], value: Any) -> bool:
        return tuple(path) == self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _PathIs) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"PathIs({self.path!r})"


def _is_prefix_leaf(x: Any) -> bool:
    return isinstance(x, (StateSharding, TreeState)) or extract.is_node_leaf(x)


def to_jax_prefix(tree: Any, head: Any = None) -> Any:
    """A sharding (or spec) prefix as JAX sees it, in the shape of lowered arguments: a
    ``StateSharding`` becomes a slot with one entry per filter group; a ``TreeState``
    (``nnx.prefix`` in graph mode) or a node-shaped prefix (tree mode) one entry per
    Variable. ``head`` stands for the slot's static part (None, or ``P()`` for
    ``shard_map``)."""

    def convert(x: Any) -> Any:
        if isinstance(x, StateSharding):
            return NodeSlot(None, x.shardings, x, head=head)
        if isinstance(x, TreeState):
            values = tuple(v for _, v in to_flat_state(x.state))
            return NodeSlot(None, (values,), head=head)
        if extract.is_node_leaf(x):
            return NodeSlot(None, (tuple(jax.tree.leaves(x)),), head=head)
        return x

    return jax.tree.map(convert, tree, is_leaf=_is_prefix_leaf)


def prefix_hooks(
    node_prefix: Callable[[Any], Any] | None, meta_types: tuple[type, ...] = (StateSharding,)
) -> tuple[Callable[..., int], Callable[[Any], int], Callable[[Any], Any]]:
    """``extract.lower``'s ``group``/``n_groups``/``meta`` hooks for the prefix that
    ``node_prefix(keypath)`` finds over a node argument: a ``StateSharding`` sorts the
    node's Variables into its filter groups; the prefix becomes the slot's metadata when
    it is one of ``meta_types``."""

    def prefix(keypath: Any) -> Any:
        return node_prefix(keypath) if node_prefix else None

    def group(keypath: Any, path: Any, leaf: Any) -> int:
        p = prefix(keypath)
        return p.group(path, leaf) if isinstance(p, StateSharding) else 0

    def n_groups(keypath: Any) -> int:
        p = prefix(keypath)
        return len(p.filters) if isinstance(p, StateSharding) else 1

    def meta(keypath: Any) -> Any:
        p = prefix(keypath)
        return p if isinstance(p, meta_types) else None

    return group, n_groups, meta


def _index_tuple(x: Any) -> tuple[int, ...]:
    if x is None:
        return ()
    try:
        return (operator.index(x),)
    except TypeError:
        return tuple(map(operator.index, x))


def _str_tuple(x: Any) -> tuple[str, ...]:
    if x is None:
        return ()
    return (x,) if isinstance(x, str) else tuple(x)


def resolve_argnums(
    fun: Callable[..., Any], nums: Any, names: Any
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``(argnums, argnames)`` each completed from the other through ``fun``'s signature
    (as ``jax.jit`` does for ``static_argnums``/``static_argnames``)."""
    argnums, argnames = _index_tuple(nums), _str_tuple(names)
    try:
        params = list(inspect.signature(fun).parameters.items())
    except (TypeError, ValueError):
        return argnums, argnames
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if nums is None and names is not None:
        argnums = tuple(
            i for i, (k, p) in enumerate(params) if p.kind == positional and k in argnames
        )
    elif names is None and nums is not None:
        argnames = tuple(
            k for i, (k, p) in enumerate(params) if p.kind == positional and i in argnums
        )
    return argnums, argnames


class JitWrapped(functools.partial, Generic[P, R]):  # type: ignore[type-arg]
    """The result of ``nnx.jit``: call it, or ``.lower``/``.trace``/``.eval_shape`` it.

    A ``functools.partial`` of its own call (``_make_call``), built when the object is,
    with ``jit_partial``'s arguments as the partial's: calling it is then CPython's C call
    of a partial, not a Python ``__call__`` method (a lookup and a bound call less per
    call, the size of the fast path's budget)."""

    def __new__(cls, fun: Callable[P, R], /, **options: Any) -> "JitWrapped[P, R]":
        call, bind = _make_call(_planned(options["in_shardings"], options["out_shardings"]))
        functools.update_wrapper(call, fun)  # what JAX names and locates (it unwraps partials)
        obj = super().__new__(cls, call, *options.get("partial_args", ()))
        obj._setup(fun, **options)
        bind(obj)
        return obj

    # cached_partial's static cache is not used (see _lower): it calls this directly
    ignores_static_cache = True

    def __init__(self, fun: Callable[P, R], /, **options: Any) -> None:
        del fun, options  # set up by __new__

    def __repr__(self) -> str:  # an object's, not a partial's
        return f"<{type(self).__module__}.{type(self).__qualname__} object at {id(self):#x}>"

    def __copy__(self) -> "JitWrapped[P, R]":  # a function: copies are itself
        return self

    def __deepcopy__(self, memo: Any) -> "JitWrapped[P, R]":
        return self

    def _setup(
        self,
        fun: Callable[P, R],
        *,
        in_shardings: Any,
        out_shardings: Any,
        static_argnums: Any,
        static_argnames: Any,
        donate_argnums: Any,
        donate_argnames: Any,
        keep_unused: bool,
        device: Any,
        backend: Any,
        inline: bool,
        graph: bool,
        graph_updates: bool,
        partial_args: tuple[Any, ...] = (),
    ) -> None:
        functools.update_wrapper(self, fun)
        extract.check_prefix(in_shardings, "in_shardings", "jit", graph, graph_updates)
        extract.check_prefix(out_shardings, "out_shardings", "jit", graph, graph_updates)
        self.fun = fun
        self.graph, self.graph_updates = graph, graph_updates
        self.partial_args = partial_args
        self.static_nums, self.static_names = resolve_argnums(fun, static_argnums, static_argnames)
        self.donate_nums, self.donate_names = resolve_argnums(fun, donate_argnums, donate_argnames)
        self.in_shardings = in_shardings
        self.has_state_sharding = any(
            isinstance(x, StateSharding)
            for x in jax.tree.leaves(in_shardings, is_leaf=_is_prefix_leaf)
        )

        def pure(*args: Any, **kwargs: Any) -> Any:
            (args, kwargs), raised = extract.raise_inputs(
                (args, kwargs),
                graph=graph,
                graph_updates=graph_updates,
                name="jit",
                constrain=True,
            )
            updates, out = raised.lower_outputs(fun(*args, **kwargs))
            if slot_shardings is not None and updates.joint is None:
                out = _constrain_slots(out, slot_shardings)
            return updates, out

        def pure_refs(*args: Any, **kwargs: Any) -> Any:
            return refs_out(pure(*args, **kwargs), (args, kwargs))

        options, slot_shardings = _sharding_options(in_shardings, out_shardings)
        functools.update_wrapper(pure, fun)
        functools.update_wrapper(pure_refs, fun)
        # what every jit of this function shares (the full path's, and each fast one)
        common: dict[str, Any] = dict(
            trace="all",
            warn_retraces=None,
            keep_unused=keep_unused,
            device=device,
            backend=backend,
            inline=inline,
        )
        self.jitted: Any = pm.jit(
            pure_refs,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
            donate_argnames=donate_argnames,
            **common,
            **options,
        )
        # The fast path (see _jit_plan): per structure (a PlanKey's number), the same
        # pure function of two flat value lists (donated, kept) and the other
        # arguments; shardings take the full path.
        self.plans: PlanCache | None = None
        self.fast_jits: dict[tuple[int, int | None], Any] = {}
        # the commonest call's own jit (fast_pair) where nothing is static or donated
        self.pairs = not (self.static_nums or self.donate_nums or self.donate_names)
        if _planned(in_shardings, out_shardings):
            self.plans = PlanCache()

            def fast_jit(number: int, pair: int | None) -> Any:
                if pair is not None:
                    return pm.jit(fast_pair(pure, number, pair), **common)
                return pm.jit(
                    fast_pure(pure, number),
                    static_argnums=_shift(self.static_nums, 2),
                    static_argnames=self.static_names,
                    donate_argnums=(0, *_shift(self.donate_nums, 2)),
                    donate_argnames=self.donate_names,
                    **common,
                )

            self.fast_jit = fast_jit

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _lower(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # cached_partial's handshake: this call takes the static cache it offers. Its
        # cached nodes share their Variables with the originals, so the split below
        # reaches (and updates) the caller's Variables.
        graphlib.GRAPH_CONTEXT.tmp_static_cache = None
        args = (*self.partial_args, *args)
        n = len(args)
        static = {i % n for i in self.static_nums if -n <= i < n}
        dyn_pos = [i for i in range(n) if i not in static]
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_names}
        donate = {i % n for i in self.donate_nums if -n <= i < n}

        def position(keypath: Any) -> Any:
            if keypath[0].idx == 0:
                return dyn_pos[keypath[1].idx]
            return keypath[1].key

        def keep_all(keypath: Any) -> bool:
            # Donated buffers must come back; in graph-update mode so do the Variables
            # of a node with an input sharding (they leave with that sharding).
            where = position(keypath)
            if where in donate or where in self.donate_names:
                return True
            return self.graph_updates and node_prefix is not None and meta(keypath) is not None

        node_prefix = self._node_prefixes(args, dyn_pos) if self.in_shardings is not None else None
        if self.in_shardings is not None:
            shardings = self.in_shardings
            if isinstance(shardings, list):
                shardings = tuple(shardings)
            extract.check_prefix_aliasing(tuple(args[i] for i in dyn_pos), shardings)

        # A sharding in a node's place also constrains its Variables' updated values.
        group, n_groups, meta = prefix_hooks(node_prefix, (StateSharding, jax.sharding.Sharding))

        (pargs, pkwargs), lowered = extract.lower(
            (tuple(args[i] for i in dyn_pos), dyn_kwargs),
            graph=self.graph,
            graph_updates=self.graph_updates,
            name="jit",
            keep_all=keep_all if donate or self.donate_names or node_prefix else None,
            group=group if node_prefix else None,
            n_groups=n_groups if node_prefix else None,
            meta=meta if node_prefix else None,
        )
        full = list(args)
        for i, x in zip(dyn_pos, pargs):
            full[i] = x
        return tuple(full), {**kwargs, **pkwargs}, lowered

    def _node_prefixes(self, args: tuple[Any, ...], dyn_pos: list[int]) -> Callable[[Any], Any]:
        shardings = self.in_shardings
        if isinstance(shardings, (tuple, list)):
            per_arg = list(shardings)
        else:
            per_arg = [shardings] * len(args)

        def lookup(keypath: Any) -> Any:
            if keypath[0].idx != 0:
                return None
            arg = args[dyn_pos[keypath[1].idx]]
            p = per_arg[keypath[1].idx] if keypath[1].idx < len(per_arg) else None
            if isinstance(p, (StateSharding, jax.sharding.Sharding)) or p is None:
                return p
            flat = extract.broadcast_prefix(
                p, arg, prefix_is_leaf=lambda x: x is None or _is_prefix_leaf(x)
            )
            leaves = jax.tree_util.tree_leaves(arg, is_leaf=extract.is_node_leaf)
            target = _follow(arg, keypath[2:])
            for leaf, pre in zip(leaves, flat):
                if leaf is target:
                    return pre
            return None

        return lookup

    def _call_full(self, plans: PlanCache, full: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call no plan serves (``full``: the partial's arguments, then the caller's):
        the full path, which builds a plan where it can."""
        epoch, token = _structure.epoch(), tracers.current_jax_trace()
        pargs, pkwargs, lowered = self._lower(full[len(self.partial_args) :], kwargs)
        plan = None
        if plans.enabled:
            n = len(full)
            static = {i % n for i in self.static_nums if -n <= i < n}
            plan = build_plan(full, kwargs, pargs, lowered, static, epoch, token)
        if plan is None:
            updates, out = refs_in(self.jitted(*pargs, **pkwargs), (pargs, pkwargs))
            return lowered.finish(updates, out)
        # A call that can take the fast path takes it now, so that later calls reuse
        # this trace; the plan is kept if the call changed no structure.
        pair = plan.pair if self.pairs else None
        jitted = self.fast_jits.get((plan.number, pair))
        if jitted is None:
            jitted = self.fast_jits[plan.number, pair] = self.fast_jit(plan.number, pair)
        plan.bind(jitted, pair)
        result = plan.run(full, kwargs)
        if _structure.epoch() == epoch:
            plans.add(plan)
        else:
            plans.discard()
        return result

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        pargs, pkwargs, _ = self._lower(args, kwargs)
        _, out = refs_in(self.jitted.eval_shape(*pargs, **pkwargs), (pargs, pkwargs))
        return extract.raise_outputs(out)

    def trace(self, *args: Any, **kwargs: Any) -> "Traced":
        pargs, pkwargs, _ = self._lower(args, kwargs)
        return Traced(self.jitted.trace(*pargs, **pkwargs), self)

    def lower(self, *args: Any, **kwargs: Any) -> "Lowered":
        pargs, pkwargs, _ = self._lower(args, kwargs)
        return Lowered(self.jitted.lower(*pargs, **pkwargs), self)


class Stage:
    """A stage of ahead-of-time compilation of an ``nnx.jit`` function: JAX's own
    object (its other attributes are JAX's), and the function that lowers arguments."""

    def __init__(self, inner: Any, wrapped: JitWrapped[..., Any]) -> None:
        self._inner = inner
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Compiled(Stage):
    """``nnx.jit(f).lower(...).compile()``: call it with the original arguments."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pargs, pkwargs, lowered = self._wrapped._lower(args, kwargs)
        static = set(self._wrapped.static_nums)
        dargs = tuple(a for i, a in enumerate(pargs) if i not in static)
        dkwargs = {k: v for k, v in pkwargs.items() if k not in self._wrapped.static_names}
        # Returned Refs are numbered among all the arguments the trace saw, static included.
        updates, out = refs_in(self._inner(*dargs, **dkwargs), (pargs, pkwargs))
        return lowered.finish(updates, out)


class Lowered(Stage):
    """``nnx.jit(f).lower(...)``."""

    def compile(self, *args: Any, **kwargs: Any) -> Compiled:
        return Compiled(self._inner.compile(*args, **kwargs), self._wrapped)


class Traced(Stage):
    """``nnx.jit(f).trace(...)``."""

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        return Lowered(self._inner.lower(*args, **kwargs), self._wrapped)


def _planned(in_shardings: Any, out_shardings: Any) -> bool:
    """Whether calls may take plans (see _jit_plan): shardings take the full path."""
    return in_shardings is None and out_shardings is None


def _make_call(planned: bool) -> tuple[Callable[..., Any], Callable[[Any], None]]:
    """The call of a ``JitWrapped`` (a partial of it: the partial's arguments come
    first), and what binds it to the object once built. Without plans (shardings), every
    call lowers. Else the commonest call, ``f(node, x)``, is served in this one frame by
    the plan of the last call (the checks of _jit_plan's ``simple``, and no graph context
    open in any thread); then the other plans; then the full path."""
    plans: Any = None
    wrapped: Any = None
    n_partial = 0
    counter, fast_types = COUNTER, FAST_LEAF_TYPES

    def bind(obj: Any) -> None:
        nonlocal plans, wrapped, n_partial
        wrapped, plans, n_partial = obj, obj.plans, len(obj.partial_args)

    def lowering(*args: Any, **kwargs: Any) -> Any:
        pargs, pkwargs, lowered = wrapped._lower(args[n_partial:], kwargs)
        updates, out = refs_in(wrapped.jitted(*pargs, **pkwargs), (pargs, pkwargs))
        return lowered.finish(updates, out)

    def call(*args: Any, **kwargs: Any) -> Any:
        inline = plans.inline
        if inline is not None and len(args) == 2 and not kwargs:
            node_id, epoch, pos, kept_vars, values, jitted, p = inline
            if pos:
                other, node = args
            else:
                node, other = args
            if (
                id(node) == node_id
                and counter.ready == epoch
                and (type(other) in fast_types or plain(other))
            ):
                if values:
                    kept = values[0]
                else:  # read afresh after a write of any Variable (see _structure)
                    writes = counter.writes
                    values.append(kept := list(map(raw_of, kept_vars)))
                    counter.held.append(values)
                    if counter.writes != writes:  # another thread wrote meanwhile
                        values.clear()
                result = jitted(kept, other)
                if len(result) == 1:
                    return result[0]
                rest = (other, None) if pos else (None, other)
                if len(result) == 5:  # jax.Refs among the results (see refs_out)
                    return p.finish(args, *refs_in(result, ([], kept, rest, {})))
                return p.finish(args, *result)
        for p, serve in zip(plans.plans, plans.calls):
            result = serve(args, kwargs)
            if result is not MISS:
                plans.last_used = True
                plans.inline = p.inline
                return result
        return wrapped._call_full(plans, args, kwargs)

    return (call if planned else lowering), bind


def _sharding_options(in_shardings: Any, out_shardings: Any) -> tuple[dict[str, Any], Any]:
    """``jax.jit``'s shardings of the pure function, and the out shardings of node slots.

    A node's out sharding (a prefix slot) is applied inside, as constraints on its slot's
    leaves: JAX's out_shardings would need the slot's leaf count, and a node returned
    twice fills only its first slot."""
    slot_shardings: Any = None
    options: dict[str, Any] = {}
    if in_shardings is not None:
        options["in_shardings"] = to_jax_prefix(in_shardings)
    if out_shardings is not None:
        jax_out = to_jax_prefix(out_shardings)
        if any(map(extract.is_slot, jax.tree.leaves(jax_out, is_leaf=extract.is_slot))):
            slot_shardings = jax_out
            jax_out = jax.tree.map(
                lambda x: None if extract.is_slot(x) else x, jax_out, is_leaf=extract.is_slot
            )
        options["out_shardings"] = (None, jax_out)
    return options, slot_shardings


def _constrain_slots(out: Any, prefix: Any) -> Any:
    """The lowered output ``out`` with each slot's leaves constrained to the shardings of
    the prefix slot over it (a group's one sharding, or one per leaf); a slot without
    leaves (a node returned again) has nothing to constrain."""
    flat, treedef = jax.tree_util.tree_flatten(out, is_leaf=extract.is_slot)
    prefixes = extract.broadcast_prefix(
        prefix,
        out,
        prefix_is_leaf=lambda x: x is None or extract.is_slot(x),
        tree_is_leaf=extract.is_slot,
    )
    for i, (leaf, p) in enumerate(zip(flat, prefixes)):
        if isinstance(leaf, NodeSlot) and isinstance(p, NodeSlot):
            groups = tuple(
                _constrain_group(group, p.groups[g] if g < len(p.groups) else None)
                for g, group in enumerate(leaf.groups)
            )
            flat[i] = NodeSlot(leaf.info, groups, leaf.meta)
    return jax.tree_util.tree_unflatten(treedef, flat)


def _constrain_group(values: tuple[Any, ...], shardings: Any) -> tuple[Any, ...]:
    if not isinstance(shardings, tuple):
        shardings = (shardings,) * len(values)
    if values and len(shardings) != len(values):  # (no values: a node returned again)
        raise ValueError(
            "jit: out_shardings is not a prefix of the output: a returned node has "
            f"{len(values)} state leaves where its out_shardings entry gives "
            f"{len(shardings)} shardings. Give one sharding for the whole node, a "
            "StateSharding, or a tree of the node's own structure."
        )
    return tuple(_constrain_leaf(v, s) for v, s in zip(values, shardings))


def _constrain_leaf(value: Any, sharding: Any) -> Any:
    if not isinstance(sharding, (jax.sharding.Sharding, jax.sharding.PartitionSpec)):
        return value
    if isinstance(value, Variable):
        return value.replace(pm.sharding.apply_sharding(value.get_raw_value(), sharding))
    return pm.sharding.apply_sharding(value, sharding)


def _shift(nums: tuple[int, ...], by: int) -> tuple[int, ...]:
    """Argument numbers of a function called with ``by`` more leading arguments
    (negative numbers count from the end and stay)."""
    return tuple(i + by if i >= 0 else i for i in nums)


def _follow(tree: Any, keypath: Sequence[Any]) -> Any:
    for k in keypath:
        if isinstance(k, jax.tree_util.SequenceKey):
            tree = tree[k.idx]
        elif isinstance(k, jax.tree_util.DictKey):
            tree = tree[k.key]
        elif isinstance(k, jax.tree_util.GetAttrKey):
            tree = getattr(tree, k.name)
    return tree


def jit(
    fun: Any = extract.Missing,
    *,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.jit`` over functions of Modules: graph nodes among the arguments keep their
    identity, and changes made to them inside (Variable values; in graph-update mode also
    new attributes) are applied to the caller's objects after the call.

    Args: as ``jax.jit``'s; ``in_shardings``/``out_shardings`` also accept
    ``StateSharding`` and ``nnx.prefix`` trees in a node's place. ``graph`` and
    ``graph_updates`` choose Flax's mode (default: ``set_graph_mode``/``set_graph_updates``).
    """
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if fun is extract.Missing:
        return functools.partial(
            jit,
            in_shardings=in_shardings,
            out_shardings=out_shardings,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
            donate_argnames=donate_argnames,
            keep_unused=keep_unused,
            device=device,
            backend=backend,
            inline=inline,
            graph=graph,
            graph_updates=updates,
        )
    fun, _, was_bound = resolve_bound_callable(fun)
    if was_bound:
        raise_bound_method_error("jit")
    return JitWrapped(
        fun,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        keep_unused=keep_unused,
        device=device,
        backend=backend,
        inline=inline,
        graph=graph,
        graph_updates=updates,
    )


def jit_partial(
    fun: Callable[..., Any],
    *partial_args: Any,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``nnx.jit(fun)`` with ``partial_args`` bound as its first arguments."""
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if not graph:
        extract.check_no_aliases("jit", args=partial_args)
    return JitWrapped(
        fun,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        keep_unused=keep_unused,
        device=device,
        backend=backend,
        inline=inline,
        graph=graph,
        graph_updates=updates,
        partial_args=partial_args,
    )
