"""Output shardings of contractions, gathers and broadcasts on Explicit meshes.

On a mesh whose axes are ``Explicit`` (the default of ``jax.make_mesh`` since JAX 0.9) an
array's sharding is part of its type, and JAX refuses an operation whose output sharding is
ambiguous: a ``dot_general`` contracting a sharded dimension, a gather from a sharded
table, an elementwise op of two arrays sharded differently. The functional ops of
``pytreemod.nn`` ask this module what to do. It reads the operands' types
(``jax.typeof(x).sharding``, which the logical names and rules put there when the
parameters were placed with ``pm.shard``) and answers with the operands, resharded where
needed, and the output sharding to request:

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
  feature sharding; a vocabulary-sharded table is looked up without gathering it;
- **picks** (a cross entropy's label logit): a masked local pick on the class axis as
  sharded, then reductions; the labels follow the logits' other dimensions;
- **broadcast operands** (a bias, a norm's scale): resharded to the sharding of the
  output's trailing dimensions.

With no mesh, or a mesh whose axes are all ``Auto``, every function here returns its
operands untouched and ``None`` for the output sharding: the ops trace exactly the program
they traced before (XLA's propagation decides). A layout the rules cannot resolve (the
operands on two meshes, an ``out_sharding=`` JAX rejects) is a ``ShardingError`` naming the
layer path, the operation, both operands' shardings and the fix.
"""

import contextlib
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from ._errors import ShardingError

Entries = list[tuple[str, ...]]
"""One tuple of mesh axis names per array dimension (``()``: replicated)."""


# ----------------------------------------------------------------------------- types


def type_sharding(x: Any) -> NamedSharding | None:
    """The ``NamedSharding`` of ``x``'s type, or ``None`` (not an array, or no mesh)."""
    if x is None or not hasattr(x, "shape"):
        return None
    try:
        sharding = jax.typeof(x).sharding
    except TypeError:
        return None
    return sharding if isinstance(sharding, NamedSharding) else None


def explicit_mesh(*arrays: Any) -> Any:
    """The (abstract) mesh of the first operand whose type is sharded over an Explicit
    axis, or ``None`` (no mesh, Auto axes, or every operand replicated)."""
    for x in arrays:
        sharding = type_sharding(x)
        if sharding is None:
            continue
        mesh = sharding.mesh
        if mesh.empty or AxisType.Explicit not in mesh.axis_types:
            continue
        if any(_entry(e) for e in sharding.spec):
            return mesh
    return None


def _entry(e: Any) -> tuple[str, ...]:
    if e is None:
        return ()
    if isinstance(e, str):
        return (e,)
    return tuple(e)


def entries(x: Any) -> Entries:
    """The sharding of ``x``'s type, one tuple of mesh axes per dimension."""
    sharding = type_sharding(x)
    spec = tuple(sharding.spec) if sharding is not None else ()
    out = [_entry(e) for e in spec]
    return out + [()] * (x.ndim - len(out))


def spec_of(ents: Sequence[tuple[str, ...]]) -> PartitionSpec:
    """A ``PartitionSpec`` of entries (``None`` for replicated dimensions)."""
    return PartitionSpec(*(None if not e else e[0] if len(e) == 1 else e for e in ents))


def _check_mesh(mesh: Any, op: str, operands: dict[str, Any]) -> None:
    for name, x in operands.items():
        sharding = type_sharding(x)
        if sharding is None or sharding.mesh.empty:
            continue
        if sharding.mesh.axis_names != mesh.axis_names or sharding.mesh.shape != mesh.shape:
            raise ShardingError(
                sharding_message(
                    op,
                    operands,
                    f"{name} is on mesh {dict(sharding.mesh.shape)} but another operand is on "
                    f"mesh {dict(mesh.shape)}",
                    "place every parameter and input on one mesh (pm.shard(model, mesh), "
                    "jax.device_put(x, sharding))",
                    sys._getframe(1),
                )
            )


def reshard(x: Any, mesh: Any, ents: Sequence[tuple[str, ...]]) -> Any:
    """``x`` resharded to ``ents`` on ``mesh`` (``x`` itself when its type already is)."""
    if list(ents) == entries(x):
        return x
    return jax.sharding.reshard(x, NamedSharding(mesh, spec_of(ents)))


def named(mesh: Any, spec: Any) -> Any:
    """``out_sharding=`` given by the user (a ``PartitionSpec`` or ``NamedSharding``) made a
    ``NamedSharding`` on the operands' mesh; ``None`` stays ``None``."""
    if spec is None or isinstance(spec, NamedSharding) or mesh is None:
        return spec
    return NamedSharding(mesh, spec if isinstance(spec, PartitionSpec) else PartitionSpec(*spec))


# ----------------------------------------------------------------------------- rules


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


def contraction(
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
    _check_mesh(mesh, op, {"x": x, "kernel": kernel})
    xs, ks, out = _contract(entries(x), entries(kernel), x_contract, k_contract, x_batch, k_batch)
    x, kernel = reshard(x, mesh, xs), reshard(kernel, mesh, ks)
    return x, kernel, NamedSharding(mesh, spec_of(out))


def einsum_contraction(
    equation: str, x: Any, kernel: Any, *, op: str
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
    _check_mesh(mesh, op, {"x": x, "kernel": kernel})
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


def _size(mesh: Any, axes: Sequence[str]) -> int:
    n = 1
    for a in axes:
        n *= mesh.shape[a]
    return n


def convolution(
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
    _check_mesh(mesh, op, {"x": x, "kernel": kernel})
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


def split_last(x: Any, parts: int) -> tuple[Any, NamedSharding | None]:
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


def gather_rows(table: Any, ids: Any, *, op: str) -> tuple[Any, NamedSharding | None]:
    """The table (resharded where needed) and the output sharding of ``table[ids]``:
    ``ids``' sharding, then the table's feature sharding (mesh axes that ``ids`` uses are
    gathered out of the table's features). A vocabulary-sharded table stays sharded."""
    mesh = explicit_mesh(table, ids)
    if mesh is None:
        return table, None
    _check_mesh(mesh, op, {"embedding": table, "ids": ids})
    ts, ids_ents = entries(table), entries(ids)
    used = _axes(ids_ents, range(ids.ndim))
    ts = [tuple(a for a in e if a not in used) for e in ts]
    if set(ts[0]) & set(ts[1]):
        ts[0] = ()
    table = reshard(table, mesh, ts)
    return table, NamedSharding(mesh, spec_of([*ids_ents, ts[1]]))


def class_pick(
    logits: Any, labels: Any, axes: Sequence[int], *, op: str
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
    _check_mesh(mesh, op, {"logits": logits, "labels": labels})
    ls = entries(logits)
    kept = [e for d, e in enumerate(ls) if d not in axes]
    labels = reshard(labels, mesh, kept)
    return labels, NamedSharding(mesh, spec_of(ls)), NamedSharding(mesh, spec_of(kept))


def match_trailing(operand: Any, like: Any) -> Any:
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


def draw_kwargs(like: Any, shape: Sequence[int]) -> dict[str, Any]:
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


def gather_dims(x: Any, dims: Sequence[int]) -> Any:
    """``x`` with ``dims`` replicated (the others keep their sharding)."""
    mesh = explicit_mesh(x)
    if mesh is None:
        return x
    return reshard(x, mesh, [() if d in dims else e for d, e in enumerate(entries(x))])


def cache_update(cache: Any, update: Any, dim: int) -> tuple[Any, Any]:
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


def steady_carry(step: Callable[..., Any], carry: Any, *args: Any) -> Any:
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


def _struct_entries(x: Any) -> Entries:
    sharding = getattr(x, "sharding", None)
    spec = tuple(sharding.spec) if isinstance(sharding, NamedSharding) else ()
    return [_entry(e) for e in spec] + [()] * (len(x.shape) - len(spec))


def like(x: Any, ref: Any) -> Any:
    """``x`` resharded to ``ref``'s sharding (two operands of one elementwise op)."""
    mesh = explicit_mesh(x, ref)
    if mesh is None:
        return x
    return reshard(x, mesh, entries(ref))


# ----------------------------------------------------------------------------- errors


def _is_module(obj: Any) -> bool:
    return hasattr(type(obj), "_pytreemod_fieldset")


def _child_name(parent: Any, child: Any) -> str | None:
    for name in getattr(type(parent), "_pytreemod_fieldset", ()):
        value = getattr(parent, name, None)
        if value is child:
            return name
        if isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                if item is child:
                    return f"{name}[{i}]"
        if isinstance(value, dict):
            for key, item in value.items():
                if item is child:
                    return f"{name}[{key!r}]"
    return None


def layer_path(frame: types.FrameType | None) -> str | None:
    """``Outer.attr.attr`` of the innermost layer whose method is running in the calling
    frames (outermost Module first), or ``None`` outside any layer."""
    chain: list[Any] = []
    while frame is not None:
        obj = frame.f_locals.get("self")
        if _is_module(obj) and (not chain or chain[-1] is not obj):
            chain.append(obj)
        frame = frame.f_back
    if not chain:
        return None
    path = type(chain[-1]).__name__
    for parent, child in zip(chain[::-1], chain[-2::-1]):
        name = _child_name(parent, child)
        path += f".{name}" if name is not None else f"/{type(child).__name__}"
    return path


def _describe(x: Any) -> str:
    sharding = type_sharding(x)
    shape = "x".join(map(str, getattr(x, "shape", ()))) or "scalar"
    spec = sharding.spec if sharding is not None else PartitionSpec()
    return f"{shape} sharded {spec}"


def sharding_message(
    op: str, operands: dict[str, Any], reason: str, fix: str, frame: types.FrameType | None
) -> str:
    where = layer_path(frame)
    shown = ", ".join(f"{k}: {_describe(v)}" for k, v in operands.items() if v is not None)
    at = f"{where}: " if where else ""
    return f"{at}pytreemod.nn.functional.{op} on an Explicit mesh ({shown}): {reason}. Fix: {fix}."


def _is_sharding_type_error(error: BaseException) -> bool:
    return any(c.__name__ == "ShardingTypeError" for c in type(error).__mro__)


@contextlib.contextmanager
def sharding_errors(op: str, **operands: Any) -> Iterator[None]:
    """Turn JAX's ``ShardingTypeError`` raised inside an op into a ``ShardingError`` that
    names the layer path, the op, the operands' shardings and the fix."""
    try:
        yield
    except Exception as error:
        if not _is_sharding_type_error(error):
            raise
        frame = sys._getframe(2)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ShardingError(
            sharding_message(
                op,
                operands,
                f"JAX cannot shard it ({reason})",
                "add a logical axis rule that shards the operands compatibly, or pass "
                "out_sharding= (a PartitionSpec of the output) to the layer call or the op",
                frame,
            )
        ) from None


def _override_mesh(override: Any, operands: Sequence[Any]) -> Any:
    """The mesh an ``out_sharding=`` override refers to: its own (a ``NamedSharding``),
    else the operands', else the context's (``jax.set_mesh``); ``None`` when there is none."""
    if isinstance(override, NamedSharding):
        return override.mesh
    mesh = explicit_mesh(*operands)
    if mesh is not None:
        return mesh
    for x in operands:
        sharding = type_sharding(x)
        if sharding is not None and not sharding.mesh.empty:
            return sharding.mesh
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def _is_explicit(mesh: Any) -> bool:
    return mesh is not None and AxisType.Explicit in mesh.axis_types


def out_kwargs(override: Any, derived: Any, *operands: Any) -> dict[str, Any]:
    """``{"out_sharding": ...}`` for a JAX call: the user's ``override`` (made a
    ``NamedSharding`` on the operands' mesh) if given and the mesh is Explicit, else the
    ``derived`` one; ``{}`` when neither (the call traces as it always did; an override
    on an Auto mesh is applied by ``constrain`` after the call)."""
    if override is not None:
        mesh = _override_mesh(override, operands)
        if _is_explicit(mesh):
            return {"out_sharding": named(mesh, override)}
    return {} if derived is None else {"out_sharding": derived}


def constrain(y: Any, override: Any, *operands: Any) -> Any:
    """``y`` with the user's ``out_sharding=`` ``override`` applied after the op: a
    ``reshard`` on an Explicit mesh (a no-op when the op already produced it), a
    sharding constraint on an Auto mesh, nothing without a mesh or an override."""
    if override is None:
        return y
    mesh = _override_mesh(override, (y, *operands))
    if mesh is None:
        return y
    sharding = named(mesh, override)
    if _is_explicit(mesh):
        return _reshard_to(y, sharding)
    return jax.lax.with_sharding_constraint(y, sharding)


def _reshard_to(y: Any, sharding: NamedSharding) -> Any:
    ents = [_entry(e) for e in sharding.spec]
    ents += [()] * (y.ndim - len(ents))
    return reshard(y, sharding.mesh, ents)
