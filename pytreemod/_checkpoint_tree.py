"""The tree side of a checkpoint, shared by the single-file and the directory formats:
the tensor name and header entry of every value of a model, and the check of a
checkpoint's entries against the ``like`` tree it is loaded into.
"""

import math
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from . import _checkpoint_format as fmt
from ._errors import CheckpointError, CheckpointFormatError, CheckpointMismatchError
from ._filters import Everything
from ._meta import AxisMetadata, peel, rebox, slot_value
from ._module import fields
from ._partition import Structure, _build, _split
from ._tree import format_path, is_array


def is_key(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jax.dtypes.prng_key)


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def box_record(box: AxisMetadata, where: str) -> fmt.BoxRecord:
    out: dict[str, Any] = {}
    for f in fields(box):
        if f.name == "value":
            continue
        value = getattr(box, f.name)
        if is_array(value):
            raise CheckpointError(
                f"Cannot save {where}: its {type(box).__name__} box holds an array in field "
                f"{f.name!r}; only the box's value may be an array."
            )
        out[f.name] = fmt.encode_field(value)
    return fmt.BoxRecord(type_name(type(box)), out)


def split_over_processes(tree: Any) -> bool:
    """Whether an array of ``tree`` is split over processes (no process has all of it)."""
    return any(
        isinstance(leaf, jax.Array)
        and not isinstance(leaf, jax.core.Tracer)
        and not leaf.is_fully_addressable
        for leaf in jax.tree.leaves(tree)
    )


def sharded_over_devices(tree: Any) -> bool:
    """Whether an array of ``tree`` is split over several devices (not replicated)."""
    return any(
        isinstance(leaf, jax.Array)
        and not isinstance(leaf, jax.core.Tracer)
        and len(leaf.sharding.device_set) > 1
        and not leaf.sharding.is_fully_replicated
        for leaf in jax.tree.leaves(tree)
    )


def describe(tree: Any, path: str, *, host: bool) -> tuple[fmt.Header, dict[str, Any]]:
    """The header entries of ``tree``'s values and their data by tensor name: host arrays
    laid out for a file (``host``), or the arrays as they are, sharded, for a directory."""
    structure, values = _split(tree)
    where = lambda slot: f"{format_path(structure.paths[slot])} in {path!r}"
    keys = tensor_keys(structure, path)
    tensors: dict[str, Any] = {}
    entries: dict[str, fmt.Entry] = {}
    aliases: dict[str, fmt.Alias] = {}
    for slot, value in enumerate(values):
        first = structure.alias[slot]
        if first is not None:
            aliases[keys[slot]] = fmt.Alias(keys[slot], plain_path(structure, slot), keys[first])
            continue
        boxes, leaf = peel(value)
        key_impl = None
        dtype = getattr(leaf, "dtype", None)
        if is_array(leaf) and dtype is not None and is_key(dtype):
            key_impl = str(jax.random.key_impl(leaf))
            data = _data(jax.random.key_data(leaf), where(slot), host)
            encoding = "key"
        else:
            data = _data(leaf, where(slot), host)
            name = np.dtype(data.dtype).name
            if name not in fmt.DTYPES:
                raise CheckpointError(
                    f"Cannot save {where(slot)}: dtype {data.dtype} is not an array dtype "
                    "JAX supports."
                )
            encoding = "native" if name in fmt.NATIVE else "bytes"
        vtype = structure.types[slot]
        entries[keys[slot]] = fmt.Entry(
            key=keys[slot],
            path=plain_path(structure, slot),
            collection=structure.collection(slot),
            variable=vtype.__name__ if vtype is not None else None,
            dtype=str(dtype) if key_impl else np.dtype(data.dtype).name,
            shape=tuple(data.shape) if key_impl is None else tuple(leaf.shape),
            encoding=encoding,
            key_impl=key_impl,
            boxes=tuple(box_record(b, where(slot)) for b in boxes),
        )
        if host and encoding == "bytes":
            data = data.reshape(-1).view(np.uint8)
        tensors[keys[slot]] = data
    return fmt.Header(entries, aliases), tensors


def _data(leaf: Any, where: str, host: bool) -> Any:
    """A leaf's data: a host array for a file; for a directory, a ``jax.Array`` as it is
    (sharded), anything else as a host array."""
    if not host and isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer):
        return leaf
    return to_numpy(leaf, where)


def tensor_keys(structure: Structure, file: str) -> list[str]:
    """The tensor name of every slot; paths that cannot be named are a CheckpointError."""
    keys: list[str] = []
    seen: dict[str, int] = {}
    for slot, path in enumerate(structure.paths):
        bad = [k for k in path if not isinstance(k, (str, int))]
        if bad:
            raise CheckpointError(
                f"{file!r}: {format_path(path)} has the key {bad[0]!r} of type "
                f"{type(bad[0]).__name__}; checkpoints name tensors by paths of string and "
                "integer keys only."
            )
        key = fmt.tensor_key(path)
        if key in seen:
            raise CheckpointError(
                f"{file!r}: the paths {format_path(structure.paths[seen[key]])} and "
                f"{format_path(path)} both map to the tensor name {key!r}; rename one of the "
                "keys."
            )
        seen[key] = slot
        keys.append(key)
    return keys


def plain_path(structure: Structure, slot: int) -> tuple[str | int, ...]:
    return cast(tuple[str | int, ...], structure.paths[slot])  # checked by tensor_keys


SCALARS = (bool, int, float, complex)  # a Variable may hold a Python number


def to_numpy(leaf: Any, where: str) -> np.ndarray:
    if type(leaf) in SCALARS:
        data = np.asarray(leaf)
        if data.dtype.hasobject:  # an int beyond 64 bits
            raise CheckpointError(f"Cannot save {where}: {leaf} does not fit in 64 bits.")
        return data
    if isinstance(leaf, jax.core.Tracer) or isinstance(leaf, jax.ShapeDtypeStruct):
        raise CheckpointError(
            f"Cannot save {where}: it is {type(leaf).__name__}, not a concrete array (an "
            "eval_shape skeleton or a value traced inside jit has no data). Save the real "
            "model, outside transformed functions."
        )
    if not is_array(leaf):
        raise CheckpointError(
            f"Cannot save {where}: the Variable holds a {type(leaf).__name__}; a saved "
            "Variable holds one array (or a number), possibly in axis-metadata boxes. Put "
            "each array in its own Variable."
        )
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        raise CheckpointError(
            f"Cannot save {where} as one file: the array is split over several processes "
            "and no process holds all of it. Save a checkpoint directory instead "
            "(directory=True, or the default directory=None)."
        )
    data = np.asarray(leaf)
    if data.dtype.byteorder == ">":  # the file is little-endian, raw bytes included
        data = data.astype(data.dtype.newbyteorder("<"))
    return data if data.flags.c_contiguous else data.copy(order="C")


def _dtype_name(leaf: Any) -> str | None:
    if type(leaf) in SCALARS:
        return np.asarray(leaf).dtype.name
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not hasattr(leaf, "shape"):
        return None
    return str(dtype) if is_key(dtype) else np.dtype(dtype).name


def _describe(dtype: Any, shape: tuple[int, ...]) -> str:
    return f"{dtype}{list(shape)}"


def check(
    path: str,
    structure: Structure,
    values: list[Any],
    keys: list[str],
    header: fmt.Header,
    pred: Any,
    *,
    raw: bool = False,
) -> tuple[list[int], dict[int, int]]:
    """Every difference between the file and ``like``. Returns the slots to read, and the
    slots the file ties to another slot where ``like`` has separate Variables (as in a
    skeleton from ``jax.eval_shape``, which does not keep ties): they are tied again."""
    problems: list[str] = []
    selected: list[int] = []
    used: set[str] = set()
    ties: dict[int, int] = {}
    everything = isinstance(pred, Everything)
    unnamed = False  # a path missing in the file, or a tensor with no place
    slot_of = {keys[s]: s for s in range(len(keys)) if structure.alias[s] is None}
    for slot, value in enumerate(values):
        key = keys[slot]
        first = structure.alias[slot]
        at = format_path(structure.paths[slot])
        if first is not None:
            if not (everything or pred(structure.paths[first], values[first])):
                continue
            used.add(key)
            alias = header.aliases.get(key)
            if alias is None or alias.of != keys[first]:
                problems.append(
                    f"{at} shares the Variable of {format_path(structure.paths[first])} in "
                    "the model, but not in the file"
                )
            continue
        if not (everything or pred(structure.paths[slot], value)):
            continue
        used.add(key)
        alias = header.aliases.get(key)
        entry = header.entries.get(alias.of if alias is not None else key)
        if entry is None:
            problems.append(
                f"{at} is missing in the file (collection {structure.collection(slot)!r})"
            )
            unnamed = True
            continue
        if alias is not None:
            target = slot_of.get(alias.of)
            if (
                target is None
                or type(values[target]) is not type(value)
                or structure.types[slot] is None
            ):
                problems.append(
                    f"{at} shares the Variable of {alias.of!r} in the file, but the model has "
                    "no Variable of the same type there to share"
                )
                continue
            ties[slot] = target
        problem = _difference(structure, slot, value, entry)
        if problem:
            problems.append(f"{at}{problem}")
        if alias is None:
            selected.append(slot)
    selected_set = set(selected)
    for slot, target in ties.items():
        if target not in selected_set:
            problems.append(
                f"{format_path(structure.paths[slot])} shares the Variable of "
                f"{format_path(structure.paths[target])} in the file, which filter= leaves out"
            )
    if everything:
        extra = sorted(set(header.entries) - used) + sorted(set(header.aliases) - used)
        problems += [f"the file's entry {k!r} has no place in the model" for k in extra]
        unnamed = unnamed or bool(extra)
    if problems:
        shown = "; ".join(problems[:6])
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        hint = ""
        if raw and unnamed and slot_of:
            hint = (
                " It is a plain safetensors file (no pytreemod header): its tensors must "
                f"have the names pm.save gives them (such as {next(iter(slot_of))!r}; "
                "pm.checkpoint_keys(model) lists them all)."
            )
        raise CheckpointMismatchError(
            f"{path!r} does not fit the model: {shown}{more}. Load into a model built with "
            f"the saved configuration, or select a subset with filter=.{hint}"
        )
    return selected, ties


def _difference(structure: Structure, slot: int, value: Any, entry: fmt.Entry) -> str:
    """How the file's entry differs from ``like``'s value at ``slot`` ('' if it fits)."""
    _, leaf = peel(value)
    want = _dtype_name(leaf)
    want_shape = () if type(leaf) in SCALARS else tuple(getattr(leaf, "shape", ()))
    if want is None:
        return f" is {type(leaf).__name__} in the model, not an array"
    if entry.shape != want_shape or entry.dtype != want:
        return (
            f": the file has {_describe(entry.dtype, entry.shape)}, the model has "
            f"{_describe(want, want_shape)}"
        )
    # A bare array has no collection of its own: only two Variables' collections compare.
    if entry.variable is not None and structure.types[slot] is not None:
        if entry.collection != structure.collection(slot):
            return (
                f" is in collection {entry.collection!r} in the file but "
                f"{structure.collection(slot)!r} in the model"
            )
    return ""


def place(data: Any, leaf: Any) -> Any:
    """The loaded value in the form of ``like``'s leaf: NumPy for a NumPy leaf, or for a
    dtype JAX would narrow (64-bit types without ``jax_enable_x64``); otherwise a
    jax.Array, placed with the leaf's sharding when it has one."""
    if isinstance(leaf, np.ndarray | np.generic):
        return np.asarray(data)
    if type(leaf) in SCALARS:
        return type(leaf)(data.item())
    if not isinstance(data, jax.Array) and jax.dtypes.canonicalize_dtype(data.dtype) != data.dtype:
        return data
    sharding = concrete_sharding(leaf)
    # waited for: the host copy dies before the next tensor is read
    return jax.block_until_ready(jax.device_put(data, sharding))


def _box_classes() -> dict[str, type[AxisMetadata]]:
    found: dict[str, type[AxisMetadata]] = {}
    todo: list[type[AxisMetadata]] = [AxisMetadata]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.setdefault(type_name(sub), sub)
            todo.append(sub)
    return found


def rebox_from_records(
    path: str,
    at: str,
    records: tuple[fmt.BoxRecord, ...],
    like_boxes: Sequence[AxisMetadata],
    value: Any,
) -> Any:
    """Wrap ``value`` in the saved boxes (innermost first); a class is looked up among
    the box classes this program has defined, never imported."""
    classes: dict[str, type[AxisMetadata]] | None = None
    for depth in range(len(records) - 1, -1, -1):
        record = records[depth]
        template = like_boxes[depth] if depth < len(like_boxes) else None
        if template is not None and type_name(type(template)) == record.type:
            cls: type[AxisMetadata] | None = type(template)
        else:
            classes = classes if classes is not None else _box_classes()
            cls = classes.get(record.type)
        if cls is None:
            raise CheckpointMismatchError(
                f"{path!r}: {at} was saved in a {record.type} box, a class this program "
                "does not define; import the module that defines it before loading."
            )
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "value" or f.name not in record.fields:
                continue
            raw = record.fields[f.name]
            if fmt.is_unsaved(raw):
                if template is not None and type(template) is cls:
                    kwargs[f.name] = getattr(template, f.name)
                continue
            kwargs[f.name] = fmt.decode_field(raw)
        try:
            value = cls(value=value, **kwargs)
        except Exception as e:
            raise CheckpointFormatError(
                f"{path!r}: {at}: the saved {cls.__name__} metadata {record.fields} does not "
                f"fit the value ({type(e).__name__}: {e})."
            ) from None
    return value


def concrete_sharding(leaf: Any) -> jax.sharding.Sharding | None:
    """The sharding to load ``leaf``'s value into; ``None`` for none (the default device).

    A skeleton made by ``eval_shape`` on an Explicit mesh carries a sharding over an
    abstract mesh (axis names and sizes, no devices): it is made concrete over the mesh
    set with ``jax.set_mesh`` when that one has the same axes, else over all devices as
    ``jax.make_mesh`` orders them (or none, when their number differs)."""
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        return None
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return sharding
    abstract = sharding.mesh
    if not isinstance(abstract, jax.sharding.AbstractMesh):
        return sharding
    mesh = jax.sharding.get_mesh()
    if not (isinstance(mesh, jax.sharding.Mesh) and mesh.abstract_mesh == abstract):
        if math.prod(abstract.axis_sizes) != jax.device_count():
            return None
        mesh = jax.make_mesh(
            abstract.axis_sizes, abstract.axis_names, axis_types=abstract.axis_types
        )
    return jax.sharding.NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)


def assemble(
    path: str,
    structure: Structure,
    values: list[Any],
    keys: list[str],
    header: fmt.Header,
    loaded: dict[int, Any],
    ties: dict[int, int],
    *,
    raw: bool,
) -> Any:
    """The loaded tree: ``loaded`` values (by slot) in their saved boxes (``like``'s for a
    ``raw`` file), the rest as ``like`` has them, places the file ties tied again."""
    if ties:
        alias = tuple(ties.get(i, a) for i, a in enumerate(structure.alias))
        structure = Structure(
            structure.treedef, structure.leaves, structure.paths, structure.types, alias
        )
    out: list[Any] = []
    for slot, value in enumerate(values):
        if structure.alias[slot] is not None:
            out.append(None)
        elif slot in loaded:
            boxes, _ = peel(value)
            if raw:  # no records: like's boxes, around the loaded value
                out.append(rebox(boxes, loaded[slot]))
                continue
            records = header.entries[keys[slot]].boxes
            where = format_path(structure.paths[slot])
            out.append(rebox_from_records(path, where, records, boxes, loaded[slot]))
        else:
            out.append(slot_value(value))
    return _build(structure, out)
