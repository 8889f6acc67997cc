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

``load`` reads with the first format that detects the path (``find_format``): pytreemod's
own (``BUILTIN_FORMATS``: its checkpoint directories, plain Orbax directories, its files,
plain safetensors files), then those added with ``register_format``
(``_checkpoint_registry``). Adding a format is registering it, never editing ``load``.
"""

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from . import _checkpoint_async as asave
from . import _checkpoint_atomic as atomic
from . import _checkpoint_dir as cdir
from . import _checkpoint_file as cfile
from . import _checkpoint_format as fmt
from . import _checkpoint_part as cpart
from . import _checkpoint_read as cread
from . import _checkpoint_registry as registry
from . import _checkpoint_tree as ctree
from ._checkpoint_async import PendingSave
from ._checkpoint_orbax import load_orbax, not_orbax, orbax_item
from ._checkpoint_registry import CheckpointFormat
from ._errors import CheckpointError, CheckpointFormatError, CheckpointMismatchError
from ._filters import FilterLike, check_collections, to_filter
from ._meta import peel
from ._partition import Structure, _split
from ._tree import format_path

T = TypeVar("T")
PathLike = str | os.PathLike[str]
FILE_SUFFIX = ".safetensors"  # a path that names a file: sharded models go into one too


def save(path: PathLike, tree: Any, *, sync: bool = True, directory: bool | None = None) -> None:
    """Write ``tree`` (a model or any PyTree of arrays) to one safetensors file, or to a
    checkpoint directory when its arrays are split over processes.

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

    ``directory``: ``None`` (default) writes a checkpoint directory when an array is
    split over processes (no process holds all of it), when ``path`` already is one, or
    when an array is split over several devices and ``path`` does not end in
    ``.safetensors``; a file otherwise. ``True`` always writes a directory (every
    process writes its own shards in parallel with Orbax, nothing is gathered on one
    host); ``False`` always a file. Every process of a
    multi-process program calls ``save`` with the same arguments. A directory holds the
    same header entries and a checksum of every shard file, and ``load`` verifies them
    all (docs/checkpoints.md). ``sync`` is for a file: a directory's manifest and
    pointer are always ``fsync``-ed, its shard files are Orbax's to write.

    Errors of the operating system (a missing or read-only folder, a full disk) are a
    ``CheckpointError`` naming ``path``; nothing partial is left behind. Temporaries
    that earlier saves to ``path`` left when they were killed are removed.

    >>> import tempfile, os, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> model = {"w": pm.Param(jnp.ones(3)), "mean": pm.BatchStat(jnp.zeros(3))}
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> pm.save(path, model)
    >>> pm.load(path, model)["w"]
    Param(f32[3])
    """
    start_save(os.fspath(path), tree, sync=sync, directory=directory, background=False)()


def save_async(
    path: PathLike, tree: Any, *, sync: bool = True, directory: bool | None = None
) -> PendingSave:
    """``save`` in the background: returns once the arrays are copied off the devices,
    while the checkpoint is written, hashed and committed in a thread.

    Training can go on at once (it may even donate the saved arrays). The returned
    ``PendingSave`` has ``wait()`` (blocks until the checkpoint is complete, and raises
    the save's error if it failed) and ``done()``, and waits on exit when used as a
    context manager. Until it is complete, the previous checkpoint at ``path`` is the one
    ``load`` reads (a ``load`` or ``save`` of ``path`` in this process waits for it); a
    crash meanwhile leaves that one. The program waits for pending saves before it exits.
    Arguments as for ``save``; errors found before the write starts (what cannot be
    saved, a missing folder) are raised here. On several processes (a checkpoint
    directory), every process calls it; the thread waits for the others at the
    distributed runtime's barriers, never at a device collective, so the training's
    collectives may run meanwhile.
    """
    path = os.fspath(path)
    return asave.start(
        path, start_save(path, tree, sync=sync, directory=directory, background=True)
    )


def start_save(
    path: str, tree: Any, *, sync: bool, directory: bool | None, background: bool
) -> Callable[[], None]:
    """Check ``tree``, copy its data off the devices and return what writes it."""
    asave.wait_for(path)
    atomic.check_folder(path)
    if directory is None:
        directory = (
            ctree.split_over_processes(tree)
            or cdir.is_checkpoint_dir(path)
            or (ctree.sharded_over_devices(tree) and not path.endswith(FILE_SUFFIX))
        )
    if directory:
        header, arrays = ctree.describe(tree, path, host=False)
        return cdir.save_dir(path, header, arrays, background=background)
    header, tensors = ctree.describe(tree, path, host=True)
    return lambda: write_file(path, header, tensors, sync=sync)


def write_file(
    path: str, header: fmt.Header, tensors: dict[str, np.ndarray], *, sync: bool
) -> None:
    """Write a checkpoint file of ``header`` and ``tensors`` atomically."""
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
    keys = ctree.tensor_keys(structure, "checkpoint_keys(tree)")
    return [k for k, alias in zip(keys, structure.alias) if alias is None]


def _atomic_write(
    path: str,
    tensors: dict[str, np.ndarray],
    metadata_of: cfile.MetadataOf,
    sync: bool,
) -> None:
    # A fresh name, not a file made in advance: safetensors truncating an existing file
    # makes ext4 (auto_da_alloc) flush it on close, which cost 2.6x the write of a 400 MB
    # model without sync. Strays of killed saves to ``path`` are removed first.
    atomic.replace(path, lambda tmp: cfile.write(tmp, tensors, metadata_of), sync=sync)


# ---------------------------------------------------------------------------- load


def load(path: PathLike, like: T, *, filter: FilterLike = True) -> T:
    """Read a checkpoint written by ``save`` into a tree shaped like ``like``.

    **Arguments:**

    - ``path``: the file; a checkpoint directory ``save`` wrote (its manifest is checked
      against ``like`` and every file this process reads against its checksum, then
      TensorStore, Orbax's storage layer, reads each array straight into ``like``'s
      sharding, on any device or process count); or a plain Orbax checkpoint directory
      holding ``pm.state(model)``
      (a ``CheckpointManager`` step, or its item folder), restored with Orbax into
      ``like``'s shardings (checked by Orbax; a damaged one is a
      ``CheckpointFormatError``, one of another structure a ``CheckpointMismatchError``);
      or a path in a format added with ``pm.checkpoint_formats.register_format``. The
      first format that detects ``path`` reads it (``pm.checkpoint_formats``); a path
      none detects is a ``CheckpointFormatError`` naming it.
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
    checksums (``save`` writes an XXH3 checksum of every MiB of every tensor, and of the
    header) are verified as it is read (one tensor at a time: the peak host memory is
    the model plus its largest tensor, not the file as well), before anything is
    returned: a changed byte anywhere in the file is a ``CheckpointFormatError`` naming
    the file and the tensor's path. Into arrays split over processes (``like``'s
    sharding), each process reads only the bytes of its own shards (whole MiB pieces,
    each verified), and the processes agree on a damaged one. Files
    written before checksums existed load unchecked, and so does a plain safetensors file
    (no pytreemod metadata, as ``safetensors.numpy.save_file`` writes) whose tensors have
    the names ``checkpoint_keys(like)`` lists: shapes and dtypes are checked, values take
    ``like``'s boxes and ties, and a changed data byte goes unnoticed. Variables the file
    ties together come back as one Variable even where ``like`` has separate ones of the
    same type (``jax.eval_shape`` and ``jax.tree.map`` rebuild every place separately);
    a bare array (not in a Variable) matches an entry of any collection.
    """
    path = os.fspath(path)
    asave.wait_for(path)
    return find_format(path).read(path, like, filter=filter)


def _selection(like: Any, filter: FilterLike) -> tuple[Structure, list[Any], Any]:
    """``like`` taken apart, and the predicate of ``filter`` (checked against ``like``'s
    collections)."""
    structure, values = _split(like)
    pred = to_filter(filter)
    check_collections(
        pred,
        "load(filter=...)",
        lambda: (structure.collection(i) for i in range(len(structure.paths))),
    )
    return structure, values, pred


def _load_file(path: str, like: Any, filter: FilterLike, *, raw: bool) -> Any:
    """Load a checkpoint file: a ``pm.save`` one, or a plain safetensors one (``raw``)."""
    structure, values, pred = _selection(like, filter)
    keys = ctree.tensor_keys(structure, path)
    header, loaded, ties = _read_file(path, structure, values, keys, pred, raw=raw)
    return ctree.assemble(path, structure, values, keys, header, loaded, ties, raw=raw)


def _load_dir(path: str, like: Any, filter: FilterLike) -> Any:
    """Load a checkpoint directory: manifest checked against ``like``, every file's
    checksum verified, then the arrays read by TensorStore into ``like``'s shardings."""
    structure, values, pred = _selection(like, filter)
    keys = ctree.tensor_keys(structure, path)
    manifest = cdir.Manifest(path)
    header = manifest.header
    selected, ties = ctree.check(path, structure, values, keys, header, pred)
    leaves = {slot: peel(values[slot])[1] for slot in selected}
    targets = {keys[s]: _dir_target(header.entries[keys[s]], leaves[s]) for s in selected}
    manifest.verify(targets)
    arrays = cdir.restore(manifest, targets)
    loaded = {
        slot: _dir_value(path, header.entries[keys[slot]], arrays[keys[slot]], leaves[slot])
        for slot in selected
    }
    return ctree.assemble(path, structure, values, keys, header, loaded, ties, raw=False)


def _dir_target(entry: fmt.Entry, leaf: Any) -> jax.ShapeDtypeStruct:
    """What Orbax restores an entry as: its stored shape and dtype in ``leaf``'s sharding
    (a key's data gets one more, unsharded, axis), or on this process's first device."""
    sharding = ctree.concrete_sharding(leaf)
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    if entry.encoding != "key":
        return jax.ShapeDtypeStruct(entry.shape, fmt.DTYPES[entry.dtype], sharding=sharding)
    width = cdir.key_width(entry.key_impl)
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = jax.sharding.PartitionSpec(
            *sharding.spec, *[None] * (len(entry.shape) + 1 - len(sharding.spec))
        )
        sharding = jax.sharding.NamedSharding(sharding.mesh, spec)
    return jax.ShapeDtypeStruct((*entry.shape, width), np.dtype(np.uint32), sharding=sharding)


def _dir_value(path: str, entry: fmt.Entry, array: jax.Array, leaf: Any) -> Any:
    """A restored array as ``like``'s leaf has it: a PRNG key rebuilt from its data, a
    host array or Python number for a leaf that is one."""
    if entry.encoding == "key":
        try:
            array = jax.random.wrap_key_data(array, impl=entry.key_impl)
        except (ValueError, TypeError) as e:
            raise CheckpointFormatError(
                f"{path!r}: entry {entry.key!r}: PRNG key implementation "
                f"{entry.key_impl!r} cannot rebuild the stored key data ({e})."
            ) from None
    if isinstance(leaf, np.ndarray | np.generic) or type(leaf) in ctree.SCALARS:
        return ctree.place(np.asarray(array), leaf)
    return array


def _read_file(
    path: str, structure: Structure, values: list[Any], keys: list[str], pred: Any, *, raw: bool
) -> tuple[Any, dict[int, Any], dict[int, int]]:
    """Check the file against ``like`` and read the selected tensors: ``(header, loaded,
    ties)``, where ``loaded`` maps slots to placed arrays and ``ties`` the slots the file
    ties to an earlier one. ``raw``: the file has no pytreemod metadata."""
    try:
        with cread.Reader(path) as f:
            shapes = f.tensors
            metadata = f.metadata
            if fmt.is_raw(metadata) != raw:
                raise _other_kind(path, raw)
            if raw:
                header = _raw_header(path, structure, keys, shapes)
            else:
                checked = metadata is not None and cfile.verify_header(path, metadata)
                header = fmt.parse_header(metadata, shapes, path, header_checked=checked)
            selected, ties = ctree.check(path, structure, values, keys, header, pred, raw=raw)
            loaded = _read_tensors(
                f, path, [header.entries[keys[s]] for s in selected], values, selected
            )
    except (CheckpointError, jax.errors.JaxRuntimeError):
        raise
    except Exception as e:
        raise CheckpointFormatError(
            f"{path!r}: cannot be read as a safetensors checkpoint: {e}. The file is "
            "truncated, corrupted or not a checkpoint; nothing was loaded."
        ) from None
    return header, loaded, ties


def _read_tensors(
    f: cread.Reader, path: str, entries: list[fmt.Entry], values: list[Any], slots: list[int]
) -> dict[int, Any]:
    """The ``entries`` read and placed (by slot) one by one: one host copy at a time. Of
    an array over several processes, this process reads only its shards
    (``_checkpoint_part``); the processes agree on a damaged one."""
    leaves = [peel(values[slot])[1] for slot in slots]
    parts = [cpart.part_sharding(e, leaf) for e, leaf in zip(entries, leaves)]
    loaded: dict[int, Any] = {}
    failure, error = -1, None
    for i, (entry, leaf, part) in enumerate(zip(entries, leaves, parts)):
        try:
            if part is None:
                loaded[slots[i]] = ctree.place(_read(f, path, entry), leaf)
            else:
                loaded[slots[i]] = cpart.read_part(f, entry, part, _what(entry))
        except CheckpointFormatError as e:
            if all(p is None for p in parts):
                raise
            failure, error = i, e  # told to the other processes first
            break
    if any(p is not None for p in parts):
        bad = cpart.agree(failure)
        if bad == failure and error is not None:
            raise error
        if bad >= 0:
            raise cfile.damaged(
                path, f"the stored bytes of {_what(entries[bad])} do not match their checksum"
            )
    return loaded


def _what(entry: fmt.Entry) -> str:
    return f"{format_path(entry.path)} (tensor {entry.key!r})"


def _other_kind(path: str, raw: bool) -> CheckpointFormatError:
    kind, has, what = ("plain safetensors", "has", "a pm.save file")
    if not raw:
        kind, has, what = ("pm.save", "has no", "a plain safetensors file")
    return CheckpointFormatError(
        f"{path!r} is not a {kind} file: it {has} pytreemod's header ({what}). "
        "pm.load(path, like) detects the format of a file itself."
    )


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
        aliases[keys[slot]] = fmt.Alias(keys[slot], ctree.plain_path(structure, slot), keys[first])
    return fmt.Header(entries, aliases)


def _read(f: cread.Reader, path: str, entry: fmt.Entry) -> Any:
    what = _what(entry)
    checksum = cfile.unlabel(entry.checksum) if entry.checksum is not None else None
    flat = f.read(entry.key, checksum, what, entry.chunk_checksums)
    if entry.encoding == "native":
        return flat.view(fmt.DTYPES[entry.dtype]).reshape(entry.shape)
    if entry.encoding == "bytes":
        return flat.view(fmt.DTYPES[entry.dtype]).reshape(entry.shape)
    code, shape = f.tensors[entry.key]
    data = flat.view(fmt.DTYPES[fmt.NATIVE_CODES[code]]).reshape(shape)
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


# ------------------------------------------------------------------------- formats


def _safetensors_metadata(path: str) -> tuple[bool, dict[str, str] | None]:
    """``(True, metadata)`` for a file that parses as safetensors, ``(False, None)`` else."""
    if not os.path.isfile(path):
        return False, None
    try:
        with cread.Reader(path) as f:
            return True, f.metadata
    except Exception:  # detection never raises: not a safetensors file
        return False, None


class _PytreemodDir(CheckpointFormat):
    """A checkpoint directory ``pm.save`` wrote (``_checkpoint_dir``)."""

    name = "pytreemod-dir"

    def detect(self, path: str) -> bool:
        return os.path.isdir(path) and cdir.is_checkpoint_dir(path)

    def read(self, path: str, like: T, *, filter: FilterLike = True) -> T:
        return _load_dir(path, like, filter)

    def write(self, path: str, tree: Any) -> None:
        save(path, tree, directory=True)


class _Orbax(CheckpointFormat):
    """An Orbax checkpoint of ``pm.state(model)`` (``_checkpoint_orbax``); read whole."""

    name = "orbax"

    def detect(self, path: str) -> bool:
        return os.path.isdir(path) and orbax_item(path) is not None

    def read(self, path: str, like: T, *, filter: FilterLike = True) -> T:
        return load_orbax(path, like)

    def explain(self, path: str) -> str | None:
        return not_orbax(path) if os.path.isdir(path) else None


class _PytreemodFile(CheckpointFormat):
    """One safetensors file with pytreemod's header and checksums."""

    name = "pytreemod-file"

    def detect(self, path: str) -> bool:
        """A file that starts as ``pm.save`` writes one (its first bytes), else one that
        parses as safetensors with metadata naming pytreemod (a file written before
        checksums, or one whose start is damaged)."""
        if os.path.isfile(path) and cfile.starts_signed(path):
            return True
        parsed, metadata = _safetensors_metadata(path)
        return parsed and not fmt.is_raw(metadata)

    def read(self, path: str, like: T, *, filter: FilterLike = True) -> T:
        return _load_file(path, like, filter, raw=False)

    def write(self, path: str, tree: Any) -> None:
        save(path, tree, directory=False)

    def explain(self, path: str) -> str | None:
        """The safetensors reader's account of a file that does not parse (cut, a wrong
        header length, bytes appended): a damaged ``pm.save`` file is told as such."""
        if not os.path.isfile(path):
            return None
        try:
            cread.Reader(path).close()
        except CheckpointFormatError as e:
            return str(e)
        except OSError as e:
            return str(cread.unreadable(path, str(e)))
        return None


class _PlainSafetensors(CheckpointFormat):
    """A safetensors file with no pytreemod metadata, tensors named as ``save`` names
    them (``checkpoint_keys``): read unchecked, with ``like``'s boxes and ties."""

    name = "safetensors"

    def detect(self, path: str) -> bool:
        parsed, metadata = _safetensors_metadata(path)
        return parsed and fmt.is_raw(metadata)

    def read(self, path: str, like: T, *, filter: FilterLike = True) -> T:
        return _load_file(path, like, filter, raw=True)


BUILTIN_FORMATS: tuple[CheckpointFormat, ...] = (
    _PytreemodDir(),
    _Orbax(),
    _PytreemodFile(),
    _PlainSafetensors(),
)
"""pytreemod's own formats, in the order ``load`` tries them, before any added one."""


def formats() -> tuple[CheckpointFormat, ...]:
    """The formats ``pm.load`` reads, in the order it tries them: pytreemod's own
    (``pytreemod-dir``, ``orbax``, ``pytreemod-file``, ``safetensors``), then those added
    with ``register_format``, in the order they were added."""
    return BUILTIN_FORMATS + registry.added_formats()


def find_format(path: PathLike) -> CheckpointFormat:
    """The format ``pm.load`` reads ``path`` with: the first of ``formats()`` that
    detects it.

    A path no format detects is a ``CheckpointError`` when nothing is there, else a
    ``CheckpointFormatError`` naming it and saying why it is none of them.
    """
    path = os.fspath(path)
    known = formats()
    for candidate in known:
        if candidate.detect(path):
            return candidate
    if not os.path.exists(path):
        raise CheckpointError(f"{path!r}: no such checkpoint file.")
    why = next((w for f in known if (w := f.explain(path)) is not None), None)
    if why is None:
        why = f"{path!r}: no checkpoint format pm.load reads recognizes it; nothing was loaded."
    names = ", ".join(f.name for f in known)
    raise CheckpointFormatError(
        f"{why} (The formats pm.load reads: {names}; "
        "pm.checkpoint_formats.register_format adds one.)"
    )


def register_format(format: CheckpointFormat) -> None:
    """Make ``pm.load`` read ``format``: it is tried after pytreemod's own formats and
    those added before it. Adding a format of a name already added replaces that one
    where it stands; pytreemod's own cannot be replaced.

    ``format`` is an instance of a ``CheckpointFormat`` subclass (``name``, ``detect``,
    ``read`` and, if it writes, ``write``)."""
    registry.add(format, reserved=frozenset(f.name for f in BUILTIN_FORMATS))


def unregister_format(name: str) -> None:
    """Stop ``pm.load`` reading the format added under ``name``."""
    registry.remove(name)
