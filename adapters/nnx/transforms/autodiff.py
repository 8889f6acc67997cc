"""``nnx.grad``, ``value_and_grad``, ``vjp``, ``jvp``, ``custom_vjp``, ``remat`` and
``DiffState``.

Graph mode with graph updates (the default): a Module argument named in ``argnums`` is
differentiated in its ``nnx.Param``s (or the state a ``DiffState`` filter selects) and its
gradient is a ``State``. With ``graph_updates=False`` or ``graph=False`` every
floating-point Variable is differentiated and the gradient is a Module of gradients, as
``jax.grad`` of a pytree. In every mode other changes the function makes to its
arguments (batch statistics, RNG counts) are applied to the caller's objects.

``grad``/``value_and_grad`` are ``pm.value_and_grad`` and ``remat`` is ``pm.remat``, on
the lowered state (``extract``), the object graph split before and merged after. NNX's
``DiffState`` is applied while lowering (the selected state is its own group of the
node's slot), so pytreemod differentiates whole lowered arguments, each handed over as
its leaves (``general.flat_leaves``: an NNX Variable keeps its metadata in the treedef).
``vjp``/``jvp`` are ``pm.vjp``/``pm.jvp`` and ``custom_vjp`` is ``pm.custom_vjp``, over
the lowered arguments' leaves: each argument reaches pytreemod as ``(treedef, leaves)``
(``_to_pm``), its cotangent flattened by the same treedef.
"""

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax

import pytreemod as pm

from .. import extract, filterlib, graphlib
from ..extract import NodeSlot, PrefixMapping, check_prefix
from ..statelib import State, to_flat_state
from ..variablelib import Param, Variable
from ._autodiff_linear import jvp as jvp
from ._autodiff_linear import rebuild
from ._autodiff_linear import vjp as vjp
from .general import (
    Purify,
    check_unbound,
    flat_leaves,
    from_leaves,
    lifted_call,
    resolve_kwargs,
)


@dataclasses.dataclass(frozen=True)
class DiffState(PrefixMapping):
    """In ``argnums``: differentiate argument ``argnum`` in the state ``filter`` selects."""

    argnum: int
    filter: Any

    def map_prefix(self, path: tuple[Any, ...], variable: Variable) -> Any:
        return filterlib.to_predicate(self.filter)(path, variable)


def _argnum_specs(argnums: Any, graph_updates: bool) -> dict[int, Any]:
    """``{argnum: filter}``; ``None`` means the whole argument (tree-mode rules)."""
    items = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    specs: dict[int, Any] = {}
    for item in items:
        index = item.argnum if isinstance(item, DiffState) else item
        if index in specs:
            raise ValueError(f"argnum {index} is repeated in argnums")
        if isinstance(item, DiffState):
            specs[index] = item.filter
        else:
            specs[index] = Param if graph_updates else None
    return specs


def _grad_general(
    f: Callable[..., Any],
    argnums: Any,
    has_aux: bool,
    holomorphic: bool,
    allow_int: bool,
    return_value: bool,
    graph: bool,
    graph_updates: bool,
) -> Callable[..., Any]:
    check_prefix(argnums, "argnums", "grad", graph, graph_updates)
    specs = _argnum_specs(argnums, graph_updates)
    single = not isinstance(argnums, (tuple, list))
    positions = tuple(specs)
    name = "grad"

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        n = len(args)
        diff = {i % n: spec for i, spec in specs.items()}
        if graph and not graph_updates:
            extract.check_prefix_aliasing(args, tuple(i in diff for i in range(n)))

        def n_groups(keypath: Any) -> int:
            return 2 if keypath[0].idx == 0 and keypath[1].idx in diff else 1

        def group(keypath: Any, path: Any, leaf: Any) -> int:
            if keypath[0].idx != 0 or keypath[1].idx not in diff:
                return 0
            spec = diff[keypath[1].idx]
            if spec is None:
                return 0
            # A Variable passed as an int argnum is differentiated whole (any type).
            if path == () and isinstance(leaf, Variable) and not _is_diffstate(argnums, keypath):
                return 0
            return 0 if filterlib.to_predicate(spec)(path, leaf) else 1

        (pargs, pkwargs), lowered = extract.lower(
            (args, kwargs),
            graph=graph,
            graph_updates=graph_updates,
            name=name,
            group=group,
            n_groups=n_groups,
        )
        call_args = list(pargs)
        rest: dict[int, Any] = {}
        for i in diff:
            call_args[i] = _strip(call_args[i], rest)

        def pure(*all_args: Any) -> Any:
            *inner_args, rest_in, inner_kwargs = all_args
            inner_args = [_unstrip(a, rest_in) for a in inner_args]
            (a, k), raised = extract.raise_inputs(
                (tuple(inner_args), inner_kwargs),
                graph=graph,
                graph_updates=graph_updates,
                name=name,
            )
            out = f(*a, **k)
            if has_aux:
                loss, aux = out
                updates, aux_out = raised.lower_outputs(aux)
                return loss, (updates, aux_out)
            updates, _ = raised.lower_outputs(None)
            return out, (updates, None)

        jax_argnums = tuple(i % n for i in positions)
        (loss, (updates, aux)), grads = _lowered_value_and_grad(
            pure, call_args, (rest, pkwargs), jax_argnums, single, holomorphic, allow_int
        )
        aux = lowered.finish(updates, aux)
        if return_value:
            grads = _process_grads(grads, single, lowered, pargs, graph_updates)
            return ((loss, aux) if has_aux else loss), grads
        grads = _process_grads(grads, single, lowered, pargs, graph_updates)
        return (grads, aux) if has_aux else grads

    return wrapper


def _lowered_value_and_grad(
    pure: Callable[..., Any],
    call_args: Sequence[Any],
    extra: tuple[Any, ...],
    argnums: tuple[int, ...],
    single: bool,
    holomorphic: bool,
    allow_int: bool,
) -> tuple[Any, Any]:
    """``pm.value_and_grad(pure, has_aux=True)(*call_args, *extra)`` in the lowered
    arguments at ``argnums``: each reaches pytreemod as the list of its leaves (an NNX
    Variable's metadata stays in its treedef), the rest as one list; the gradients come
    back in the arguments' own structure, as ``jax.value_and_grad`` gives them."""
    diff = [flat_leaves(call_args[i]) for i in argnums]
    if not allow_int:
        _check_inexact(leaf for _, leaves in diff for leaf in leaves)
    others = tuple(None if i in argnums else a for i, a in enumerate(call_args))
    others_def, others_leaves = flat_leaves((others, extra))

    def g(*leaves: Any) -> Any:
        *diff_leaves, rest_leaves = leaves
        args, extra_in = others_def.unflatten(rest_leaves)
        args = list(args)
        for i, (treedef, _), values in zip(argnums, diff, diff_leaves):
            args[i] = treedef.unflatten(values)
        return pure(*args, *extra_in)

    value, grads = pm.value_and_grad(
        g,
        argnums=0 if single else tuple(range(len(argnums))),
        has_aux=True,
        holomorphic=holomorphic,
        allow_int=allow_int,
    )(*(leaves for _, leaves in diff), others_leaves)
    per_arg = (grads,) if single else grads
    out = tuple(treedef.unflatten(gs) for (treedef, _), gs in zip(diff, per_arg))
    return value, out[0] if single else out


def _check_inexact(leaves: Any) -> None:
    """JAX's error for a differentiated array that is not real or complex (an integer
    Variable, an RNG key or counter of a model's ``Rngs``), as ``jax.grad`` raises it for
    Flax (pytreemod's own grad leaves such leaves out instead)."""
    for leaf in leaves:
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and not jax.numpy.issubdtype(dtype, jax.numpy.inexact):
            raise TypeError(
                "grad requires real- or complex-valued inputs (input dtype that is a "
                f"sub-dtype of np.inexact), but got {dtype}. If you want to use Boolean- or "
                "integer-valued inputs, use vjp or set allow_int to True."
            )


def _is_diffstate(argnums: Any, keypath: Any) -> bool:
    items = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    return any(isinstance(x, DiffState) and x.argnum == keypath[1].idx for x in items)


def _strip(tree: Any, rest: dict[int, Any]) -> Any:
    def strip(x: Any) -> Any:
        if isinstance(x, NodeSlot) and len(x.groups) == 2:
            rest[x.info.index] = x.groups[1]
            return NodeSlot(x.info, (x.groups[0],), x.meta)
        return x

    return jax.tree.map(strip, tree, is_leaf=extract.is_slot)


def _unstrip(tree: Any, rest: dict[int, Any]) -> Any:
    def unstrip(x: Any) -> Any:
        if isinstance(x, NodeSlot) and x.info.index in rest:
            return NodeSlot(x.info, (x.groups[0], rest[x.info.index]), x.meta)
        return x

    return jax.tree.map(unstrip, tree, is_leaf=extract.is_slot)


def _process_grads(
    grads: Any, single: bool, lowered: Any, pargs: Sequence[Any], graph_updates: bool
) -> Any:
    """Slots of gradients as NNX returns them: with graph updates a ``State`` (the
    Variable itself for a Variable argument); otherwise rebuilt objects of gradients."""
    tree = grads if not single else (grads,)
    rebuilt: list[Any] = []

    def convert(x: Any) -> Any:
        if not isinstance(x, NodeSlot):
            return x
        node = lowered.nodes[x.info.index]
        if graph_updates:
            if isinstance(node, Variable) and x.groups[0]:
                return x.groups[0][0]
            return State.from_flat_path(dict(zip(x.info.paths[0], x.groups[0])))
        if not rebuilt:
            rebuilt.append(rebuild(tree, pargs))
        return rebuilt[0][x.info.index]

    out = tuple(jax.tree.map(convert, g, is_leaf=extract.is_slot) for g in tree)
    return out[0] if single else out


def grad(
    f: Any = extract.Missing,
    *,
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence[Any] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.grad`` over functions of Modules (see the module docstring for modes).

    ``argnums`` takes ints and ``DiffState(argnum, filter)``; in graph mode an int
    differentiates a Module's ``nnx.Param``s and its gradient is a ``State``.
    """
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if f is extract.Missing:
        return functools.partial(
            grad,
            argnums=argnums,
            has_aux=has_aux,
            holomorphic=holomorphic,
            allow_int=allow_int,
            graph=graph,
            graph_updates=updates,
        )
    check_unbound(f, "grad")
    return _grad_general(f, argnums, has_aux, holomorphic, allow_int, False, graph, updates)


def value_and_grad(
    f: Any = extract.Missing,
    *,
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence[Any] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.value_and_grad`` over functions of Modules; ``argnums`` as for ``grad``."""
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if f is extract.Missing:
        return functools.partial(
            value_and_grad,
            argnums=argnums,
            has_aux=has_aux,
            holomorphic=holomorphic,
            allow_int=allow_int,
            graph=graph,
            graph_updates=updates,
        )
    check_unbound(f, "value_and_grad")
    return _grad_general(f, argnums, has_aux, holomorphic, allow_int, True, graph, updates)


def remat(
    f: Any = extract.Missing,
    *,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.checkpoint`` over functions of Modules (``pm.remat`` on the lowered
    arguments): intermediates are recomputed in the backward pass; changes to the
    arguments are applied after the call."""
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if f is extract.Missing:
        return functools.partial(
            remat,
            prevent_cse=prevent_cse,
            static_argnums=static_argnums,
            policy=policy,
            graph=graph,
            graph_updates=updates,
        )
    check_unbound(f, "remat")
    fun = f

    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def transform(purify: Purify) -> Callable[..., Any]:
        def call(*pargs: Any, **pkwargs: Any) -> Any:
            # The static arguments stay as they are; the others reach pm.remat as leaves.
            n = len(pargs)
            fixed = {i % n: pargs[i] for i in static if -n <= i < n}
            treedef, leaves = flat_leaves(
                (tuple(a for i, a in enumerate(pargs) if i not in fixed), pkwargs)
            )

            def inner(leaves: list[Any], *statics: Any) -> Any:
                dyn, kw = treedef.unflatten(leaves)
                it_s, it_d = iter(statics), iter(dyn)
                full = [next(it_s) if i in fixed else next(it_d) for i in range(n)]
                return flat_leaves(purify(fun)(*full, **kw))

            order = sorted(fixed)
            remat = pm.remat(
                inner,
                prevent_cse=prevent_cse,
                static_argnums=tuple(range(1, len(order) + 1)),
                policy=policy,
            )
            return from_leaves(remat(leaves, *(fixed[i] for i in order)))

        return call

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return lifted_call(
            transform, args, kwargs, graph=graph, graph_updates=updates, name="remat"
        )

    return wrapper


def _lower_each(args: tuple[Any, ...], graph: bool, name: str) -> tuple[list[Any], list[Any]]:
    """Each argument lowered on its own (its cotangent is lowered the same way)."""
    pairs = [extract.lower(a, graph=graph, graph_updates=False, name=name) for a in args]
    return [p for p, _ in pairs], [lw for _, lw in pairs]


def _raise_each(pargs: Sequence[Any], graph: bool, name: str) -> tuple[list[Any], list[Any]]:
    pairs = [extract.raise_inputs(p, graph=graph, graph_updates=False, name=name) for p in pargs]
    return [a for a, _ in pairs], [r for _, r in pairs]


class CustomVjp:
    """``nnx.custom_vjp(f)``: call it; ``defvjp(fwd, bwd)`` sets the rule.

    ``fwd(*args)`` returns ``(out, residual)``; ``bwd(*nondiff_args, residual, out_g)``
    returns one cotangent per differentiable argument (a Module of cotangents for a
    Module). Changes ``f``/``fwd`` make to the arguments are applied to the caller's."""

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: tuple[int, ...], graph: bool):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = nondiff_argnums
        self.graph = graph
        name = "custom_vjp"

        def pure(*flat_args: Any) -> Any:
            args, raised = _raise_each([from_leaves(a) for a in flat_args], graph, name)
            out = fun(*args)
            changes = [r.lower_outputs(None)[0] for r in raised]
            extract.check_no_aliases(name, args=args, out=out)
            return flat_leaves((extract.lower_outputs(out), changes))

        self.custom = pm.custom_vjp(pure, nondiff_argnums=nondiff_argnums)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = resolve_kwargs(self.fun, args, kwargs)
        extract.check_no_aliases("custom_vjp", args=args)
        pargs, lowered = _lower_each(args, self.graph, "custom_vjp")
        out, changes = from_leaves(self.custom(*_to_pm(pargs, self.nondiff_argnums)))
        for lw, ch in zip(lowered, changes):
            lw.finish(ch, None)
        return extract.raise_outputs(out)

    def defvjp(
        self,
        fwd: Callable[..., Any],
        bwd: Callable[..., Any],
        symbolic_zeros: bool = False,
    ) -> None:
        graph, name = self.graph, "custom_vjp"

        layouts: list[Any] = []  # per argument, set while fwd is traced (bwd follows)
        wants_updates = _accepts_keyword(bwd, "updates_g")

        treedefs: list[Any] = []  # per differentiable argument, set while fwd is traced
        nondiff = self.nondiff_argnums

        def fwd_pure(*flat_args: Any) -> Any:
            args, raised = _raise_each([from_leaves(a) for a in flat_args], graph, name)
            out, residual = fwd(*args)
            changes = [r.lower_outputs(None)[0] for r in raised]
            layouts[:] = [_update_layout(a, r) for a, r in zip(args, raised)]
            treedefs[:] = [a[0] for i, a in enumerate(flat_args) if i not in nondiff]
            lowered_out = flat_leaves((extract.lower_outputs(out), changes))
            return lowered_out, flat_leaves(extract.lower_outputs(residual))

        def bwd_pure(*all_args: Any) -> Any:
            *nondiff_flat, residual, out_flat = all_args
            out_g, changes_g = from_leaves(out_flat)
            residual = from_leaves(residual)
            nondiff_args = [extract.raise_outputs(from_leaves(p)) for p in nondiff_flat]
            kwargs = {}
            if wants_updates:
                updates_g = zip(layouts, changes_g)
                kwargs["updates_g"] = tuple(_updates_cotangent(lay, u) for lay, u in updates_g)
            result = bwd(
                *nondiff_args,
                extract.raise_outputs(residual),
                extract.raise_outputs(out_g),
                **kwargs,
            )
            lowered = [
                extract.lower(r, graph=graph, graph_updates=False, name=name)[0] for r in result
            ]
            return tuple(_cotangent_leaves(t, c) for t, c in zip(treedefs, lowered))

        self.fwd, self.bwd = fwd, bwd
        self.custom.defvjp(fwd_pure, bwd_pure, symbolic_zeros=symbolic_zeros)


def _to_pm(args: Sequence[Any], nondiff: Sequence[int]) -> list[tuple[Any, list[Any]]]:
    """Each lowered argument as ``(treedef, leaves)`` for ``pm.custom_vjp``: the numbers
    of a differentiable argument as arrays (JAX traces them), a nondiff argument's left
    as they are (JAX hands nondiff arguments over untouched)."""
    out: list[tuple[Any, list[Any]]] = []
    for i, a in enumerate(args):
        if i in nondiff:
            leaves, treedef = jax.tree_util.tree_flatten(a)
            out.append((treedef, leaves))
        else:
            out.append(flat_leaves(a))
    return out


def _cotangent_leaves(treedef: Any, ct: Any) -> Any:
    """``bwd``'s cotangent ``ct`` for an argument handed over as ``(treedef, leaves)``:
    its leaves by that treedef. As in ``jax.custom_vjp`` a None stands for zeros (of a
    leaf or a whole subtree). A cotangent of another structure is returned as it is, for
    ``pm.custom_vjp`` to report."""
    n = treedef.num_leaves
    if ct is None:
        return treedef, [None] * n
    leaves: list[Any] = [None] * n
    dummy = treedef.unflatten(list(range(n)))

    def put(c: Any, d: Any) -> None:
        if c is not None:
            for k in jax.tree.leaves(d):
                leaves[k] = c

    try:
        jax.tree.map(put, ct, dummy, is_leaf=lambda x: x is None)
    except (ValueError, TypeError):
        return ct
    return treedef, leaves


def _accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _update_layout(arg: Any, raised: Any) -> tuple[Any, ...]:
    """What ``custom_vjp``'s bwd needs to show an argument's update cotangents: its tree
    structure, where its nodes are, their GraphDef and the Variables they held."""
    flat, treedef = jax.tree_util.tree_flatten(arg, is_leaf=extract.is_node_leaf)
    where = [i for i, x in enumerate(flat) if extract.is_node_leaf(x)]
    return treedef, len(flat), where, raised.graphdef, raised.entry


def _updates_cotangent(layout: tuple[Any, ...], updates: Any) -> Any:
    """The argument shaped as it was, each Variable the function updated holding its
    update's cotangent, every other leaf None (Flax's ``updates_g``)."""
    treedef, n, where, graphdef, entry = layout
    leaves: list[Any] = [None] * n
    if graphdef is not None and where:
        changed = dict(zip(updates.indices, updates.values))
        flat = {
            p: v.replace(changed[j]) if j in changed and isinstance(v, Variable) else None
            for j, (p, v) in enumerate(entry)
        }
        nodes = list(graphlib.merge(graphdef, State.from_flat_path(flat)))
        for path, value in flat.items():
            if value is None:
                _clear_path(nodes, path)
        for k, i in enumerate(where):
            leaves[i] = nodes[k]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _clear_path(root: Any, path: tuple[Any, ...]) -> None:
    """Put None at ``path`` under ``root`` (an attribute, list item or dict entry)."""
    parent = root
    for key in path[:-1]:
        parent = parent[key] if isinstance(parent, (list, dict)) else getattr(parent, key)
    key = path[-1]
    if isinstance(parent, (list, dict)):
        parent[key] = None
    else:
        setattr(parent, key, None)


class GraphCustomVjp:
    """``nnx.custom_vjp`` in graph-update mode (Flax's ``CustomVjp``).

    Each differentiable graph-node argument enters ``pm.custom_vjp`` as the State of its
    differentiable Variables (all of them, or those a ``DiffState`` in ``nondiff_argnums``
    selects; the rest is closed over). ``f``/``fwd`` see rebuilt objects; what they do to
    them (new values, new attributes) comes back as each node's full state and is applied
    to the caller's objects. ``bwd(*nondiff_args, residual, (args_g, out_g))`` gets that
    state's cotangents (``args_g``: one State per node argument) and returns one cotangent
    per differentiable argument: a State (or Variable) shaped like its input."""

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: tuple[Any, ...]) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.jax_nondiff = tuple(x for x in nondiff_argnums if isinstance(x, int))
        self.filters: dict[int, Any] = {}
        for x in nondiff_argnums:
            index = x.argnum if isinstance(x, DiffState) else x
            if index in self.filters:
                raise ValueError(f"argnum {index} is repeated in nondiff_argnums")
            self.filters[index] = x.filter if isinstance(x, DiffState) else False
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self.symbolic_zeros: bool | None = None

    def defvjp(
        self, fwd: Callable[..., Any], bwd: Callable[..., Any], symbolic_zeros: bool = False
    ) -> None:
        self.fwd, self.bwd, self.symbolic_zeros = fwd, bwd, symbolic_zeros

    def _split(self, args: tuple[Any, ...]) -> tuple[Any, list[Any], Any, dict[Any, Any]]:
        """``(treedef, flat args, joint graphdef, closed-over state)``; node leaves of the
        flat args replaced by their differentiable state."""
        flat, treedef = jax.tree_util.tree_flatten_with_path(args, is_leaf=extract.is_node_leaf)
        where = [i for i, (_, x) in enumerate(flat) if extract.is_node_leaf(x)]
        for i in where:
            keypath, value = flat[i]
            if keypath[0].idx in self.jax_nondiff:
                raise TypeError(
                    "Passing integers to nondiff_argnums for graph nodes arguments in "
                    f"custom_vjp is not supported. Got False at path "
                    f"{jax.tree_util.keystr(keypath)} for value {value}"
                )
        nodes = tuple(flat[i][1] for i in where)
        leaves = [x for _, x in flat]
        if not nodes:
            return treedef, leaves, None, {}
        graphdef, state = graphlib.split(nodes)
        passed: list[dict[Any, Any]] = [{} for _ in nodes]
        rest: dict[Any, Any] = {}
        for path, var in to_flat_state(state):
            k = cast(int, path[0])
            spec = self.filters.get(flat[where[k]][0][0].idx, True)
            if spec is True or filterlib.to_predicate(spec)(path[1:], var):
                passed[k][path[1:]] = var
            else:
                rest[path] = var
        for k, i in enumerate(where):
            own = passed[k]
            leaves[i] = own[()] if () in own else State.from_flat_path(own)
        return treedef, leaves, graphdef, rest

    def _rebuild(self, pure: tuple[Any, ...], treedef: Any, graphdef: Any, rest: Any) -> Any:
        """The arguments as objects again (inside the transform), from ``pure``."""
        flat = jax.tree_util.tree_leaves(pure, is_leaf=_is_pure_node)
        if graphdef is None:
            return jax.tree_util.tree_unflatten(treedef, flat)
        joint = dict(rest)
        where = [i for i, x in enumerate(flat) if _is_pure_node(x)]
        for k, i in enumerate(where):
            x = flat[i]
            if isinstance(x, Variable):
                joint[(k,)] = x
            else:
                joint.update({(k, *p): v for p, v in to_flat_state(x)})
        nodes = graphlib.merge(graphdef, State.from_flat_path(joint), copy=True)
        for k, i in enumerate(where):
            flat[i] = nodes[k]
        return jax.tree_util.tree_unflatten(treedef, flat)

    def _outputs(self, args: tuple[Any, ...], out: Any) -> tuple[Any, Any]:
        """Each differentiable argument with its nodes as ``TreeState``s (other leaves
        None), and ``out`` lowered, an argument node in it as a reference to that node
        (its state, and so its cotangent, is the argument's)."""
        diff = tuple(a for i, a in enumerate(args) if i not in self.jax_nondiff)
        nodes = [x for x in jax.tree.leaves(diff, is_leaf=extract.is_node_leaf)]
        ids = {id(x): k for k, x in enumerate(nodes) if extract.is_node_leaf(x)}
        out = jax.tree.map(
            lambda x: _ArgRef(ids[id(x)]) if id(x) in ids else x,
            out,
            is_leaf=extract.is_node_leaf,
        )
        states = jax.tree.map(
            lambda x: extract.TreeState(*graphlib.split(x)) if extract.is_node_leaf(x) else None,
            diff,
            is_leaf=extract.is_node_leaf,
        )
        return states, extract.lower_outputs(out)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = resolve_kwargs(self.fun, args, kwargs)
        fwd, bwd = self.fwd, self.bwd
        if fwd is None or bwd is None or self.symbolic_zeros is None:
            raise ValueError()
        treedef, pure, graphdef, rest = self._split(args)
        pure_args = jax.tree_util.tree_unflatten(treedef, pure)
        fun, nondiff = self.fun, self.jax_nondiff
        node_mask = jax.tree.map(
            _is_pure_node,
            tuple(a for i, a in enumerate(pure_args) if i not in nondiff),
            is_leaf=_is_pure_node,
        )

        flat_in = _to_pm(pure_args, nondiff)

        def fun_pure(*flat: Any) -> Any:
            inner = self._rebuild(tuple(map(from_leaves, flat)), treedef, graphdef, rest)
            return flat_leaves(self._outputs(inner, fun(*inner)))

        def fwd_pure(*flat: Any) -> Any:
            inner = self._rebuild(tuple(map(from_leaves, flat)), treedef, graphdef, rest)
            out, residual = fwd(*inner)
            lowered_out = flat_leaves(self._outputs(inner, out))
            return lowered_out, flat_leaves(extract.lower_outputs(residual))

        def bwd_pure(*all_args: Any) -> Any:
            *nondiff_flat, residual, out_flat = all_args
            args_g, out_g = from_leaves(out_flat)
            nondiff_args = [from_leaves(p) for p in nondiff_flat]
            residual = from_leaves(residual)
            args_g = jax.tree.map(
                lambda x: x.state if isinstance(x, extract.TreeState) else x,
                args_g,
                is_leaf=lambda x: isinstance(x, extract.TreeState),
            )
            tangent = bwd(*nondiff_args, extract.raise_outputs(residual), (args_g, out_g))

            def check(is_node: bool, x: Any) -> Any:
                if is_node and not isinstance(x, (jax.Array, State, Variable)):
                    raise ValueError(f"Expected State or Variable, got {type(x)}")
                return x

            checked = jax.tree.map(check, node_mask, tuple(tangent), is_leaf=_is_pure_node)
            diff_defs = [t for i, (t, _) in enumerate(flat_in) if i not in nondiff]
            return tuple(_cotangent_leaves(t, c) for t, c in zip(diff_defs, checked))

        custom = pm.custom_vjp(fun_pure, nondiff_argnums=nondiff)
        custom.defvjp(fwd_pure, bwd_pure, symbolic_zeros=self.symbolic_zeros)
        args_out, out = from_leaves(custom(*flat_in))
        diff_args = tuple(a for i, a in enumerate(args) if i not in nondiff)
        originals = jax.tree.leaves(diff_args, is_leaf=extract.is_node_leaf)
        results = jax.tree.leaves(
            args_out, is_leaf=lambda x: isinstance(x, extract.TreeState) or x is None
        )
        for node, result in zip(originals, results):
            if isinstance(result, extract.TreeState):
                fresh = graphlib.merge(result.graphdef, result.state)
                origins = tuple((p, p) for p, _ in graphlib.iter_graph(fresh, graph=True))
                extract.graft(fresh, node, origins)
        return jax.tree.map(
            lambda x: originals[x.k] if isinstance(x, _ArgRef) else x,
            extract.raise_outputs(out),
            is_leaf=lambda x: isinstance(x, _ArgRef),
        )


class _ArgRef:
    """In ``custom_vjp``'s output: the ``k``-th node of its differentiable arguments."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k


jax.tree_util.register_pytree_node(_ArgRef, lambda r: ((), r.k), lambda k, _: _ArgRef(k))


def _is_pure_node(x: Any) -> bool:
    return isinstance(x, (State, Variable))


def custom_vjp(
    fun: Any = extract.Missing,
    *,
    nondiff_argnums: tuple[int | DiffState, ...] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.custom_vjp`` over functions of Modules (``graph_updates=False`` or tree
    mode); see ``CustomVjp``."""
    graph, updates = extract.resolve_modes(graph, graph_updates)
    if fun is extract.Missing:
        return functools.partial(
            custom_vjp, nondiff_argnums=nondiff_argnums, graph=graph, graph_updates=updates
        )
    check_unbound(fun, "custom_vjp")
    check_prefix(nondiff_argnums, "nondiff_argnums", "custom_vjp", graph, updates)
    if graph and updates:
        return GraphCustomVjp(fun, tuple(nondiff_argnums))
    return CustomVjp(fun, cast(tuple[int, ...], tuple(nondiff_argnums)), graph)
