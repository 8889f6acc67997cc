"""``save`` / ``load``: one safetensors file per model or state, checked before use.

``save`` writes every variable's value as a tensor named by its path
(``blocks.3.mlp.kernel``) and describes each in the header (``_checkpoint_format``):
collection, Variable type, axis-metadata boxes, dtype, PRNG key implementation, and
which places share a Variable. The write is atomic: a temporary file in the same
directory, flushed, then renamed over the target.

``load`` reads the header, checks the whole file against the ``like`` tree (a real model
or an ``eval_shape`` skeleton) and only then reads the tensors and builds a new tree.
A file is untrusted: nothing in it is imported, evaluated or unpickled, and any problem
is a ``CheckpointFormatError`` or ``CheckpointMismatchError`` naming the file. A plain
safetensors file (no pytreemod metadata) is read as one whose tensors are named as
``save`` names them, with no checksums, boxes or collections (``_raw_header``).
"""

import contextlib
import functools
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import safetensors

from . import _checkpoint_file as cfile
from . import _checkpoint_format as fmt
from ._checkpoint_orbax import load_orbax
from ._errors import CheckpointError, CheckpointFormatError, CheckpointMismatchError
from ._filters import Everything, FilterLike, check_collections, to_filter
from ._meta import AxisMetadata
from ._module import fields
from ._partition import Structure, _build, _split
from ._tree import format_path, is_array
from ._variables import Variable

T = TypeVar("T")
PathLike = str | os.PathLike[str]


def _is_key(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _peel(value: Any) -> tuple[list[AxisMetadata], Any]:
    """The boxes around a slot's value (outermost first) and the leaf inside them."""
    boxes: list[AxisMetadata] = []
    if isinstance(value, Variable):
        value = value.value
    while isinstance(value, AxisMetadata):
        boxes.append(value)
        value = value.value
    return boxes, value


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _box_record(box: AxisMetadata, where: str) -> fmt.BoxRecord:
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
    return fmt.BoxRecord(_type_name(type(box)), out)


def _keys(structure: Structure, file: str) -> list[str]:
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


def _plain(structure: Structure, slot: int) -> tuple[str | int, ...]:
    return cast(tuple[str | int, ...], structure.paths[slot])  # checked by _keys


_SCALARS = (bool, int, float, complex)  # a Variable may hold a Python number


def _to_numpy(leaf: Any, where: str) -> np.ndarray:
    if type(leaf) in _SCALARS:
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
            f"Cannot save {where}: the array is split over several processes. Write it "
            "with Orbax (see docs/checkpoints.md), which saves each process's shards."
        )
    data = np.asarray(leaf)
    if data.dtype.byteorder == ">":  # the file is little-endian, raw bytes included
        data = data.astype(data.dtype.newbyteorder("<"))
    return data if data.flags.c_contiguous else data.copy(order="C")


def save(path: PathLike, tree: Any, *, sync: bool = True) -> None:
    """Write ``tree`` (a model or any PyTree of arrays) to one safetensors file.

    Tensors are named by path (``blocks.3.mlp.kernel``); the header records each value's
    collection, Variable type, axis-metadata boxes, dtype (bfloat16, float8 and int4
    included) and PRNG key implementation, and which places share one Variable. Every
    array is stored, and so is a Python number held by a Variable; static parts
    (functions, strings, numbers outside Variables: configuration) are not, and ``load``
    takes them from ``like``.

    The file is written to a temporary file in the same folder, then renamed into place:
    a crash of the process mid-write leaves the old file (or none) intact, never a
    partial one. ``sync`` (default) also makes the write durable against a power loss or
    OS crash by ``fsync``-ing the file before the rename and the folder after it;
    ``sync=False`` skips both (the OS writes the data back later, as safetensors'
    ``save_file`` does), which is faster when many checkpoints are written and losing
    the latest on a power cut is acceptable.

    >>> import tempfile, os, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> model = {"w": pm.Param(jnp.ones(3)), "mean": pm.BatchStat(jnp.zeros(3))}
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> pm.save(path, model)
    >>> pm.load(path, model)["w"]
    Param(f32[3])
    """
    path = os.fspath(path)
    structure, values = _split(tree)
    where = lambda slot: f"{format_path(structure.paths[slot])} in {path!r}"
    keys = _keys(structure, path)
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, fmt.Entry] = {}
    aliases: dict[str, fmt.Alias] = {}
    for slot, value in enumerate(values):
        first = structure.alias[slot]
        if first is not None:
            aliases[keys[slot]] = fmt.Alias(keys[slot], _plain(structure, slot), keys[first])
            continue
        boxes, leaf = _peel(value)
        key_impl = None
        dtype = getattr(leaf, "dtype", None)
        if is_array(leaf) and dtype is not None and _is_key(dtype):
            key_impl = str(jax.random.key_impl(leaf))
            data = _to_numpy(jax.random.key_data(leaf), where(slot))
            encoding = "key"
        else:
            data = _to_numpy(leaf, where(slot))
            if data.dtype.name not in fmt.DTYPES:
                raise CheckpointError(
                    f"Cannot save {where(slot)}: dtype {data.dtype} is not an array dtype "
                    "JAX supports."
                )
            encoding = "native" if data.dtype.name in fmt.NATIVE else "bytes"
        vtype = structure.types[slot]
        entries[keys[slot]] = fmt.Entry(
            key=keys[slot],
            path=_plain(structure, slot),
            collection=structure.collection(slot),
            variable=vtype.__name__ if vtype is not None else None,
            dtype=str(dtype) if key_impl else data.dtype.name,
            shape=tuple(data.shape) if key_impl is None else tuple(leaf.shape),
            encoding=encoding,
            key_impl=key_impl,
            boxes=tuple(_box_record(b, where(slot)) for b in boxes),
        )
        tensors[keys[slot]] = data if encoding != "bytes" else data.reshape(-1).view(np.uint8)
    header = fmt.Header(entries, aliases)
    _atomic_write(path, tensors, header.to_metadata, sync)


def checkpoint_keys(tree: Any) -> list[str]:
    """The tensor names ``save`` gives ``tree``'s values, in the tree's order.

    Each is the path's keys joined by dots (``blocks.3.mlp.kernel``; a dot inside a key
    is escaped as ``\\.``); a tied Variable is stored once, under its first place. These
    are the names ``load`` expects in a plain safetensors file (one without pytreemod's
    header), such as one written by ``safetensors.numpy.save_file``:

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> w = pm.Param(jnp.ones(3))
    >>> pm.checkpoint_keys({"enc": [w, pm.BatchStat(jnp.zeros(2))], "dec": w})
    ['dec', 'enc.1']
    """
    structure, _ = _split(tree)
    keys = _keys(structure, "checkpoint_keys(tree)")
    return [k for k, alias in zip(keys, structure.alias) if alias is None]


def _atomic_write(
    path: str,
    tensors: dict[str, np.ndarray],
    metadata_of: Callable[[Mapping[str, str]], dict[str, str]],
    sync: bool,
) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    # A fresh name (64 random bits), not a file made in advance: safetensors truncating an
    # existing file makes ext4 (auto_da_alloc) flush it on close, which cost 2.6x the
    # write of a 400 MB model without sync.
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    try:
        cfile.write(tmp, tensors, metadata_of)  # hashes each tensor as it writes it
        if sync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not sync:
        return
    with contextlib.suppress(OSError):  # make the rename durable where the OS allows it
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# ---------------------------------------------------------------------------- load


def load(path: PathLike, like: T, *, filter: FilterLike = True) -> T:
    """Read a checkpoint written by ``save`` into a tree shaped like ``like``.

    **Arguments:**

    - ``path``: the file; or an Orbax checkpoint directory holding ``pm.state(model)``
      (a ``CheckpointManager`` step, or its item folder), restored with Orbax into
      ``like``'s shardings (checked by Orbax; a damaged one is a
      ``CheckpointFormatError``, one of another structure a ``CheckpointMismatchError``).
    - ``like``: a model (or PyTree) of the saved structure: a real one, or an
      ``eval_shape`` skeleton of ``ShapeDtypeStruct`` leaves. Its static parts, Variable
      types and ties are the result's; its values are only used for checking, and for the
      variables ``filter`` leaves out, which are kept as they are.
    - ``filter``: which variables to load (pytreemod's filter language, e.g. ``"params"``).
      With the default (everything), every entry of the file must have a place in
      ``like``; with a filter, entries it does not select are ignored.

    **Returns:** a new tree; values are ``jax.Array`` (placed with ``like``'s sharding when
    it has one), NumPy arrays where ``like`` holds NumPy arrays. Boxes come back with the
    saved metadata (fields that cannot be stored, such as a mesh, are taken from
    ``like``'s box).

    Every path, collection, shape, dtype and tie is checked before any tensor is read: a
    difference raises ``CheckpointMismatchError`` naming the file, the path and both
    shapes/dtypes; a malformed file raises ``CheckpointFormatError``. Each tensor's
    checksum (``save`` writes XXH3 checksums of every tensor and of the header) is
    verified as it is read, before anything is returned: a changed byte anywhere in the
    file is a ``CheckpointFormatError`` naming the file and the tensor's path. Files
    written before checksums existed load unchecked, and so does a plain safetensors file
    (no pytreemod metadata, as ``safetensors.numpy.save_file`` writes) whose tensors have
    the names ``checkpoint_keys(like)`` lists: shapes and dtypes are checked, values take
    ``like``'s boxes and ties, and a changed data byte goes unnoticed. Variables the file
    ties together come back as one Variable even where ``like`` has separate ones of the
    same type (``jax.eval_shape`` and ``jax.tree.map`` rebuild every place separately);
    a bare array (not in a Variable) matches an entry of any collection.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return load_orbax(path, like)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path!r}: no such checkpoint file.")
    structure, values = _split(like)
    pred = to_filter(filter)
    check_collections(
        pred,
        "load(filter=...)",
        lambda: (structure.collection(i) for i in range(len(structure.paths))),
    )
    keys = _keys(structure, path)
    header, raw, loaded, ties = _read_file(path, structure, values, keys, pred)
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
            boxes, _ = _peel(value)
            if raw:  # no records: like's boxes, around the loaded value
                out.append(
                    functools.reduce(lambda v, b: b.replace_boxed(v), boxes[::-1], loaded[slot])
                )
                continue
            records = header.entries[keys[slot]].boxes
            where = format_path(structure.paths[slot])
            out.append(_rebox(path, where, records, boxes, loaded[slot]))
        else:
            out.append(value.value if isinstance(value, Variable) else value)
    return _build(structure, out)


def _read_file(
    path: str, structure: Structure, values: list[Any], keys: list[str], pred: Any
) -> tuple[Any, bool, dict[int, Any], dict[int, int]]:
    """Check the file against ``like`` and read the selected tensors: ``(header, raw,
    loaded, ties)``, where ``raw`` says the file has no pytreemod metadata, ``loaded`` maps
    slots to placed arrays and ``ties`` the slots the file ties to an earlier one."""
    try:
        with safetensors.safe_open(path, framework="np") as f:
            names = list(f.keys())
            shapes = {n: _slice_info(f, n) for n in names}
            metadata = f.metadata()
            raw = fmt.is_raw(metadata)
            if raw:
                header = _raw_header(path, structure, keys, shapes)
            else:
                checked = metadata is not None and cfile.verify_header(path, metadata)
                header = fmt.parse_header(metadata, shapes, path, header_checked=checked)
            selected, ties = _check(path, structure, values, keys, header, pred, raw=raw)
            loaded = {  # placed one by one: one host copy at a time
                slot: _place(_read(f, path, header.entries[keys[slot]]), _peel(values[slot])[1])
                for slot in selected
            }
    except (CheckpointError, jax.errors.JaxRuntimeError):
        raise
    except Exception as e:
        raise CheckpointFormatError(
            f"{path!r}: cannot be read as a safetensors checkpoint: {e}. The file is "
            "truncated, corrupted or not a checkpoint; nothing was loaded."
        ) from None
    return header, raw, loaded, ties


def _raw_header(
    path: str,
    structure: Structure,
    keys: list[str],
    tensors: Mapping[str, tuple[str, tuple[int, ...]]],
) -> fmt.Header:
    """The header of a plain safetensors file (no pytreemod metadata): each tensor as a
    native entry of its own dtype (its safetensors code where NumPy has none), no boxes,
    no collection; ``like``'s ties as the file's, since a tied Variable is stored once."""
    entries = {
        name: fmt.Entry(
            key=name,
            path=(name,),
            collection="",
            variable=None,
            dtype=fmt.NATIVE_CODES.get(code, code),
            shape=shape,
            encoding="native",
            key_impl=None,
            boxes=(),
        )
        for name, (code, shape) in tensors.items()
    }
    aliases: dict[str, fmt.Alias] = {}
    for slot, first in enumerate(structure.alias):
        if first is None:
            continue
        if keys[slot] in entries:
            raise CheckpointMismatchError(
                f"{path!r}: {format_path(structure.paths[slot])} shares the Variable of "
                f"{format_path(structure.paths[first])} in the model, but the file has a "
                f"tensor {keys[slot]!r} of its own. pytreemod stores a tied Variable once, "
                f"under {keys[first]!r}; remove the tensor {keys[slot]!r} from the file."
            )
        aliases[keys[slot]] = fmt.Alias(keys[slot], _plain(structure, slot), keys[first])
    return fmt.Header(entries, aliases)


def _slice_info(f: Any, name: str) -> tuple[str, tuple[int, ...]]:
    s = f.get_slice(name)
    return str(s.get_dtype()), tuple(s.get_shape())


def _dtype_name(leaf: Any) -> str | None:
    if type(leaf) in _SCALARS:
        return np.asarray(leaf).dtype.name
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not hasattr(leaf, "shape"):
        return None
    return str(dtype) if _is_key(dtype) else np.dtype(dtype).name


def _describe(dtype: Any, shape: tuple[int, ...]) -> str:
    return f"{dtype}{list(shape)}"


def _check(
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
    _, leaf = _peel(value)
    want = _dtype_name(leaf)
    want_shape = () if type(leaf) in _SCALARS else tuple(getattr(leaf, "shape", ()))
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


def _read(f: Any, path: str, entry: fmt.Entry) -> Any:
    data = f.get_tensor(entry.key)
    if entry.checksum is not None:
        what = f"{format_path(entry.path)} (tensor {entry.key!r})"
        cfile.verify_tensor(path, what, data, entry.checksum.partition(":")[2])
    if entry.encoding == "bytes":
        return np.frombuffer(data.tobytes(), dtype=fmt.DTYPES[entry.dtype]).reshape(entry.shape)
    if entry.encoding == "key":
        try:
            keys = jax.random.wrap_key_data(jnp.asarray(data), impl=entry.key_impl)
        except (ValueError, TypeError) as e:
            raise CheckpointFormatError(
                f"{path!r}: entry {entry.key!r}: PRNG key implementation "
                f"{entry.key_impl!r} cannot rebuild the stored key data ({e})."
            ) from None
        if str(keys.dtype) != entry.dtype:
            raise CheckpointFormatError(
                f"{path!r}: entry {entry.key!r}: key implementation {entry.key_impl!r} gives "
                f"{keys.dtype}, but the header says {entry.dtype}."
            )
        return keys
    return data


def _place(data: Any, leaf: Any) -> Any:
    """The loaded value in the form of ``like``'s leaf: NumPy for a NumPy leaf, or for a
    dtype JAX would narrow (64-bit types without ``jax_enable_x64``); otherwise a
    jax.Array, placed with the leaf's sharding when it has one."""
    if isinstance(leaf, np.ndarray | np.generic):
        return np.asarray(data)
    if type(leaf) in _SCALARS:
        return type(leaf)(data.item())
    if not isinstance(data, jax.Array) and jax.dtypes.canonicalize_dtype(data.dtype) != data.dtype:
        return data
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, jax.sharding.Sharding):
        return jax.device_put(data, sharding)
    return jnp.asarray(data)


def _box_classes() -> dict[str, type[AxisMetadata]]:
    found: dict[str, type[AxisMetadata]] = {}
    todo: list[type[AxisMetadata]] = [AxisMetadata]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.setdefault(_type_name(sub), sub)
            todo.append(sub)
    return found


def _rebox(
    path: str,
    at: str,
    records: tuple[fmt.BoxRecord, ...],
    like_boxes: list[AxisMetadata],
    value: Any,
) -> Any:
    """Wrap ``value`` in the saved boxes (innermost first); a class is looked up among
    the box classes this program has defined, never imported."""
    classes: dict[str, type[AxisMetadata]] | None = None
    for depth in range(len(records) - 1, -1, -1):
        record = records[depth]
        template = like_boxes[depth] if depth < len(like_boxes) else None
        if template is not None and _type_name(type(template)) == record.type:
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
