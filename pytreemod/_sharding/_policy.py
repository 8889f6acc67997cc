"""The Explicit-mesh policy: how ``pm.nn``'s ops shard their operands and outputs.

On a mesh whose axes are ``Explicit`` (the default of ``jax.make_mesh`` since JAX 0.9) an
array's sharding is part of its type, and JAX refuses an operation whose output sharding is
ambiguous: a ``dot_general`` contracting a sharded dimension, a gather from a sharded
table, an elementwise op of two arrays sharded differently. The functional ops of
``pytreemod.nn`` ask the current ``ExplicitMeshPolicy`` what to do. It reads the operands'
types (``jax.typeof(x).sharding``, which the logical names and rules put there when the
parameters were placed with ``pm.shard``) and answers with the operands, resharded where
needed, and the output sharding to request. The rules (docs/sharding.md has them as a
table):

- **column parallel**: a kernel dimension that is not contracted keeps its sharding in the
  output (``x @ W[embed, mlp@model] -> y[batch, mlp@model]``);
- **row parallel**: a contracted dimension sharded the same way on both sides is reduced
  (an all-reduce) and the output keeps the input's batch sharding;
- **FSDP**: kernel mesh axes that the input already uses for its own (batch) dimensions
  are gathered before use (``W[embed@data, mlp] -> W[embed, mlp]`` when ``x`` is
  ``[batch@data, embed]``);
- **contracted dimension sharded on one side only**: the replicated side is sliced to
  match (a local slice, no communication) unless that mesh axis is busy on it, in which
  case the sharded side is gathered;
- **gathers** (embedding lookup): the output is ``ids``' sharding followed by the table's
  feature sharding, without the mesh axes of ``ids`` or of the ``"batch"`` rule; a
  vocabulary-sharded table is looked up without gathering it;
- **picks** (a cross entropy's label logit): a masked local pick on the class axis as
  sharded, then reductions; the labels follow the logits' other dimensions;
- **broadcast operands** (a bias, a norm's scale): resharded to the sharding of the
  output's trailing dimensions.

With no mesh, or a mesh whose axes are all ``Auto``, every method returns its operands
untouched and ``None`` for the output sharding: the ops trace exactly the program they
traced before (XLA's propagation decides).

The policy is an object: ``pm.sharding.explicit_mesh_policy()`` is the current one, and
``with pm.sharding.use_explicit_mesh_policy(policy):`` replaces it (a subclass overriding
one method changes that rule for every layer). Rules are read when a function is traced.
"""

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding

from .._errors import ShardingError
from ._resolve import batch_mesh_axes
from ._types import Entries, check_mesh, entries, entry, explicit_mesh, reshard, spec_of


def _axes(ents: Sequence[tuple[str, ...]], dims: Sequence[int]) -> set[str]:
    return {a for d in dims for a in ents[d]}


def _contract(
    xs: Entries,
    ks: Entries,
    x_contract: Sequence[int],
    k_contract: Sequence[int],
    x_batch: Sequence[int],
    k_batch: Sequence[int],
) -> tuple[Entries, Entries, Entries]:
    """The contraction rules on entries: the operands' target entries and the output's
    (batch dimensions, then ``x``'s free dimensions, then ``kernel``'s)."""
    x_free = [d for d in range(len(xs)) if d not in x_contract and d not in x_batch]
    k_free = [d for d in range(len(ks)) if d not in k_contract and d not in k_batch]
    # FSDP: mesh axes the input uses for its own dimensions are gathered out of the kernel.
    used = _axes(xs, [*x_free, *x_batch])
    xs, ks = list(xs), [tuple(a for a in e if a not in used) for e in ks]
    for xb, kb in zip(x_batch, k_batch):
        ks[kb] = xs[xb]
    for xc, kc in zip(x_contract, k_contract):
        ex, ek = xs[xc], ks[kc]
        if ex == ek:
            continue  # both sharded alike (row parallel: reduced) or both replicated
        k_other = _axes(ks, [d for d in range(len(ks)) if d != kc])
        x_other = _axes(xs, [d for d in range(len(xs)) if d != xc])
        if not ek and not set(ex) & k_other:
            ks[kc] = ex  # slice the replicated kernel to the input's sharding
        elif ek and not set(ek) & x_other:
            xs[xc] = ek  # slice (or move) the input to the kernel's sharding
        else:
            xs[xc], ks[kc] = (), ()  # gather both on this dimension
    out = [xs[d] for d in x_batch] + [xs[d] for d in x_free] + [ks[d] for d in k_free]
    return xs, ks, out


def _size(mesh: Any, axes: Sequence[str]) -> int:
    n = 1
    for a in axes:
        n *= mesh.shape[a]
    return n


def _struct_entries(x: Any) -> Entries:
    sharding = getattr(x, "sharding", None)
    spec = tuple(sharding.spec) if isinstance(sharding, NamedSharding) else ()
    return [entry(e) for e in spec] + [()] * (len(x.shape) - len(spec))


class ExplicitMeshPolicy:
    """How the ops of ``pytreemod.nn`` shard their operands and outputs on Explicit meshes.

    Each method takes the operands of one kind of operation and returns them (resharded
    where the rule needs it) with the output sharding to request, or the operands
    untouched and ``None`` off Explicit meshes. Subclass it and override a method to
    change one rule for every layer, then install it with ``use_explicit_mesh_policy``.

    >>> import pytreemod as pm
    >>> type(pm.sharding.explicit_mesh_policy()).__name__
    'ExplicitMeshPolicy'
    """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def contraction(
        self,
        x: Any,
        kernel: Any,
        x_contract: Sequence[int],
        k_contract: Sequence[int],
        x_batch: Sequence[int] = (),
        k_batch: Sequence[int] = (),
        *,
        op: str,
    ) -> tuple[Any, Any, NamedSharding | None]:
        """Operands (resharded where needed) and the output sharding of a ``dot_general``.

        The output sharding is in ``dot_general``'s order: batch dimensions, then ``x``'s free
        dimensions, then ``kernel``'s free dimensions. ``None`` (and the operands untouched) off
        Explicit meshes.
        """
        mesh = explicit_mesh(x, kernel)
        if mesh is None:
            return x, kernel, None
        check_mesh(mesh, op, {"x": x, "kernel": kernel})
        xs, ks, out = _contract(
            entries(x), entries(kernel), x_contract, k_contract, x_batch, k_batch
        )
        x, kernel = reshard(x, mesh, xs), reshard(kernel, mesh, ks)
        return x, kernel, NamedSharding(mesh, spec_of(out))

    def einsum_contraction(
        self, equation: str, x: Any, kernel: Any, *, op: str
    ) -> tuple[Any, Any, NamedSharding | None]:
        """``contraction`` for ``jnp.einsum(equation, x, kernel)`` (two operands, explicit
        output, each label once per operand): labels in both operands and the output are
        batch dimensions, labels in both and not in the output are contracted. The output
        sharding is in the equation's output order. ``None`` for other equations (JAX's own
        einsum rule decides) and off Explicit meshes."""
        ins, _, out = equation.partition("->")
        parts = ins.split(",")
        if "..." in equation or len(parts) != 2 or not out:
            return x, kernel, None
        xl, kl = parts
        if len(set(xl)) != len(xl) or len(set(kl)) != len(kl) or len(xl) != x.ndim:
            return x, kernel, None
        mesh = explicit_mesh(x, kernel)
        if mesh is None or len(kl) != kernel.ndim:
            return x, kernel, None
        check_mesh(mesh, op, {"x": x, "kernel": kernel})
        shared = [c for c in xl if c in kl]
        batch = [c for c in shared if c in out]
        contract = [c for c in shared if c not in out]
        xs, ks, dot_out = _contract(
            entries(x),
            entries(kernel),
            [xl.index(c) for c in contract],
            [kl.index(c) for c in contract],
            [xl.index(c) for c in batch],
            [kl.index(c) for c in batch],
        )
        order = batch + [c for c in xl if c not in kl] + [c for c in kl if c not in xl]
        if sorted(order) != sorted(out):  # a label summed out of one operand alone
            return x, kernel, None
        by_label = dict(zip(order, dot_out))
        x, kernel = reshard(x, mesh, xs), reshard(kernel, mesh, ks)
        return x, kernel, NamedSharding(mesh, spec_of([by_label[c] for c in out]))

    def convolution(
        self,
        x: Any,
        kernel: Any,
        out_shape: Callable[[], Sequence[int]],
        feature_group_count: int,
        *,
        op: str,
    ) -> tuple[Any, Any, NamedSharding | None]:
        """Operands (resharded where needed) and the output sharding of a channels-last
        ``conv_general_dilated`` of ``x`` ``(batch, *spatial, in)`` with ``kernel``
        ``(*window, in // groups, out)``; ``out_shape()`` gives the output's shape.

        The batch dimension keeps its sharding; a spatial dimension keeps its sharding when
        the output's size along it divides evenly (XLA exchanges the halos), else it is
        gathered; the window is replicated; the features follow the contraction rules
        (column parallel, row parallel, FSDP). A grouped (depthwise) convolution shards the
        input channels, the output features and the output alike: each device convolves the
        groups it holds. ``None`` (and the operands untouched) off Explicit meshes.
        """
        mesh = explicit_mesh(x, kernel)
        if mesh is None:
            return x, kernel, None
        check_mesh(mesh, op, {"x": x, "kernel": kernel})
        n_sp = kernel.ndim - 2
        xs, ks = entries(x), entries(kernel)
        if any(xs[1 : n_sp + 1]):
            shape = out_shape()
            for d in range(1, n_sp + 1):
                if xs[d] and shape[d] % _size(mesh, xs[d]):
                    xs[d] = ()
        ks = [() if d < n_sp else e for d, e in enumerate(ks)]
        c, i, o = x.ndim - 1, kernel.ndim - 2, kernel.ndim - 1
        if feature_group_count == 1:
            xs, ks, dot_out = _contract(xs, ks, (c,), (i,), (), ())
            out = [*dot_out[: x.ndim - 1], dot_out[-1]]
        else:
            used = _axes(xs, range(c))
            ks = [tuple(a for a in e if a not in used) for e in ks]
            target = ks[o] or xs[c]
            xs[c], ks[i], ks[o] = target, (), target
            out = [*xs[:c], target]
        x, kernel = reshard(x, mesh, xs), reshard(kernel, mesh, ks)
        return x, kernel, NamedSharding(mesh, spec_of(out))

    def split_last(self, x: Any, parts: int) -> tuple[Any, NamedSharding | None]:
        """``x`` (resharded where needed) and the sharding of ``x.reshape(..., parts, -1)``:
        the last dimension's sharding moves to ``parts`` when its mesh size divides
        ``parts``; otherwise the last dimension is gathered first (GroupNorm's groups)."""
        mesh = explicit_mesh(x)
        if mesh is None:
            return x, None
        xs = entries(x)
        last = xs[-1]
        if last and parts % _size(mesh, last):
            xs[-1] = last = ()
            x = reshard(x, mesh, xs)
        return x, NamedSharding(mesh, spec_of([*xs[:-1], last, ()]))

    def gather_rows(self, table: Any, ids: Any, *, op: str) -> tuple[Any, NamedSharding | None]:
        """The table (resharded where needed) and the output sharding of ``table[ids]``:
        ``ids``' sharding, then the table's feature sharding. Mesh axes that ``ids`` uses, and
        those the active rules give to the logical ``"batch"`` axis, are gathered out of the
        table's features (FSDP: a table stored split over the batch's mesh axes is used whole,
        so that a lookup without a batch axis, such as a position table's, combines with the
        batch-sharded activations). A vocabulary-sharded table stays sharded."""
        mesh = explicit_mesh(table, ids)
        if mesh is None:
            return table, None
        check_mesh(mesh, op, {"embedding": table, "ids": ids})
        ts, ids_ents = entries(table), entries(ids)
        used = _axes(ids_ents, range(ids.ndim)) | batch_mesh_axes()
        ts = [tuple(a for a in e if a not in used) for e in ts]
        if set(ts[0]) & set(ts[1]):
            ts[0] = ()
        table = reshard(table, mesh, ts)
        return table, NamedSharding(mesh, spec_of([*ids_ents, ts[1]]))

    def class_pick(
        self, logits: Any, labels: Any, axes: Sequence[int], *, op: str
    ) -> tuple[Any, NamedSharding | None, NamedSharding | None]:
        """For picking one class per example out of ``logits`` along ``axes`` (a cross
        entropy's label logit) with a mask and reductions, not a gather: ``labels`` resharded
        to ``logits``' sharding of the other dimensions, ``logits``' sharding (for the class
        indices built to compare with them) and the output's (``logits``' without ``axes``).
        A class axis sharded over a mesh axis stays sharded: each device picks among the
        classes it holds and the reductions sum the devices. ``None`` shardings (and
        ``labels`` untouched) off Explicit meshes."""
        mesh = explicit_mesh(logits, labels)
        if mesh is None:
            return labels, None, None
        check_mesh(mesh, op, {"logits": logits, "labels": labels})
        ls = entries(logits)
        kept = [e for d, e in enumerate(ls) if d not in axes]
        labels = reshard(labels, mesh, kept)
        return labels, NamedSharding(mesh, spec_of(ls)), NamedSharding(mesh, spec_of(kept))

    def match_trailing(self, operand: Any, like: Any) -> Any:
        """``operand`` (a bias, a norm's scale: it broadcasts against ``like``'s trailing
        dimensions) resharded to the sharding of those dimensions of ``like``."""
        if operand is None:
            return None
        mesh = explicit_mesh(operand, like)
        if mesh is None:
            return operand
        n = operand.ndim
        trailing = entries(like)[like.ndim - n :] if n else []
        sizes = tuple(like.shape[like.ndim - n :]) if n else ()
        # A broadcast (size-1) dimension is replicated; the others follow ``like``.
        target = [e if operand.shape[d] == sizes[d] else () for d, e in enumerate(trailing)]
        return reshard(operand, mesh, target)

    def draw_kwargs(self, like: Any, shape: Sequence[int]) -> dict[str, Any]:
        """``{"out_sharding": ...}`` for a random draw of ``shape`` (``like``'s shape with some
        dimensions broadcast to 1) used elementwise with ``like``: on an Explicit mesh the draw
        takes ``like``'s sharding, replicated along the broadcast dimensions, so combining the
        two needs no reshard (JAX refuses a replicated mask against a sharded operand); ``{}``
        otherwise (the draw traces as it always did)."""
        mesh = explicit_mesh(like)
        if mesh is None:
            return {}
        ents = [e if shape[d] == like.shape[d] else () for d, e in enumerate(entries(like))]
        return {"out_sharding": NamedSharding(mesh, spec_of(ents))}

    def gather_dims(self, x: Any, dims: Sequence[int]) -> Any:
        """``x`` with ``dims`` replicated (the others keep their sharding)."""
        mesh = explicit_mesh(x)
        if mesh is None:
            return x
        return reshard(x, mesh, [() if d in dims else e for d, e in enumerate(entries(x))])

    def cache_update(self, cache: Any, update: Any, dim: int) -> tuple[Any, Any]:
        """A decoding cache and the slice written into it (``dynamic_update_slice``), both
        resharded to one sharding with dimension ``dim`` (time) replicated: the cache's own
        when it is sharded (a cache created from logical names keeps its type across steps;
        the update follows it), else the update's (a cache built replicated follows the keys
        and values projected into it: batch over ``data``, heads over ``model``)."""
        mesh = explicit_mesh(cache, update)
        if mesh is None:
            return cache, update
        own = entries(cache)
        target = own if any(e for d, e in enumerate(own) if d != dim) else entries(update)
        target[dim] = ()
        return reshard(cache, mesh, target), reshard(update, mesh, target)

    def steady_carry(self, step: Callable[..., Any], carry: Any, *args: Any) -> Any:
        """``carry`` resharded to the sharding ``step(carry, *args)`` gives the carry it
        returns (the first element of its result): a scan's carry must keep one type, and a
        carry built replicated (zeros) comes back sharded like the projections that make it.
        Off Explicit meshes ``carry`` itself."""
        mesh = explicit_mesh(*jax.tree.leaves((carry, args)))
        if mesh is None:
            return carry
        for _ in range(3):  # a fixed point: the carry's sharding can feed back into the step's
            out = jax.eval_shape(step, carry, *args)[0]
            new = jax.tree.map(lambda c, o: reshard(c, mesh, _struct_entries(o)), carry, out)
            if all(a is b for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(carry))):
                break
            carry = new
        return carry

    def like(self, x: Any, ref: Any) -> Any:
        """``x`` resharded to ``ref``'s sharding (two operands of one elementwise op)."""
        mesh = explicit_mesh(x, ref)
        if mesh is None:
            return x
        return reshard(x, mesh, entries(ref))


_DEFAULT = ExplicitMeshPolicy()
_POLICY: contextvars.ContextVar[ExplicitMeshPolicy | None] = contextvars.ContextVar(
    "pytreemod_explicit_mesh_policy", default=None
)


def explicit_mesh_policy() -> ExplicitMeshPolicy:
    """The ``ExplicitMeshPolicy`` the ops of ``pytreemod.nn`` consult now."""
    policy = _POLICY.get()
    return _DEFAULT if policy is None else policy


@contextlib.contextmanager
def use_explicit_mesh_policy(policy: ExplicitMeshPolicy) -> Iterator[ExplicitMeshPolicy]:
    """Make ``policy`` the Explicit-mesh policy inside a ``with`` block (nestable; a
    ``contextvars`` variable, like the logical axis rules). A function jitted inside the
    block keeps the policy it was traced with."""
    if not isinstance(policy, ExplicitMeshPolicy):
        raise ShardingError(
            f"use_explicit_mesh_policy needs an ExplicitMeshPolicy (or a subclass), got "
            f"{type(policy).__name__}; subclass pm.sharding.ExplicitMeshPolicy and override "
            "the rules to change."
        )
    token = _POLICY.set(policy)
    try:
        yield policy
    finally:
        _POLICY.reset(token)
