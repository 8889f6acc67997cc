"""A checkpoint directory: arrays sharded over devices and processes, written by Orbax,
every file checksummed.

``save`` writes a directory when the model has arrays split over processes (one file
cannot hold them: no process has their data), or when the path already is such a
directory. Its layout::

    <path>/CHECKPOINT                 {"format": "pytreemod-dir", "current": "v-..."}
    <path>/v-<host>-<pid>-<random>/   the current version: an Orbax PyTree checkpoint
        t0/, t1/, ...                 one zarr array per stored value, a file per shard
        _METADATA, ...                Orbax's own files
        pytreemod.json                the manifest (below)

Every process writes its own shards (Orbax, without OCDBT, so every shard is a file of
its own), then hashes the shard files it wrote (XXH3, as the single-file format). Process
0 hashes Orbax's metadata files, gathers the others' checksums and writes the manifest:
the same header entries as a ``save`` file (path, collection, Variable type, boxes,
dtype, key implementation, ties), which Orbax array holds each, and every file's
checksum; the manifest carries the checksum of its own bytes. Only then does process 0
point ``CHECKPOINT`` at the new version (an atomic rename) and remove the old one. A kill
at any moment leaves ``CHECKPOINT`` naming a complete version; the next save removes
the versions of writers that are gone.

``load`` checks the manifest against ``like`` (as for a file), verifies the checksum of
every file it reads (the processes of a multi-process load share the files and agree on
the result), and only then reads the arrays, with TensorStore (the storage layer Orbax
wrote them with), straight into ``like``'s shardings: any device or process count,
either mesh kind.
"""

import collections
import concurrent.futures
import contextlib
import functools
import glob
import itertools
import json
import os
import queue
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from . import _checkpoint_atomic as atomic
from . import _checkpoint_file as cfile
from . import _checkpoint_format as fmt
from ._checkpoint_orbax import absl_notices_at_debug, orbax_failure
from ._errors import CheckpointError, CheckpointFormatError
from ._tree import format_path

POINTER = "CHECKPOINT"
MANIFEST = "pytreemod.json"
FORMAT = "pytreemod-dir"
VERSION = 1
_VERSION_DIR = re.compile(r"v-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[0-9a-f]{16}(?P<tmp>\..*)?")
_CHUNK = 1 << 20  # a shard file is read in pieces of this size
_SAVES = itertools.count()  # every process saves in the same order: barrier names agree


def is_checkpoint_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, POINTER))


def _ocp() -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise CheckpointError(
            "A checkpoint directory (arrays sharded over processes) is written and read with "
            "Orbax: install the orbax-checkpoint package (pip install orbax-checkpoint)."
        ) from None
    return ocp


_idle: dict[bool, queue.SimpleQueue[Any]] = {False: queue.SimpleQueue(), True: queue.SimpleQueue()}


def _checkpointer(ocp: Any, background: bool) -> Any:
    """An idle Orbax checkpointer of the directory layout (an ``AsyncCheckpointer`` for a
    background save), made only when none is idle: making one (its handler, TensorStore
    context and threads) costs 50-100 ms of CPU time a save, and its threads stay."""
    try:
        return _idle[background].get_nowait()
    except queue.Empty:
        handler = ocp.PyTreeCheckpointHandler(use_ocdbt=False)
        return ocp.AsyncCheckpointer(handler) if background else ocp.Checkpointer(handler)


def _close(checkpointer: Any) -> None:
    """Close a checkpointer whose save failed (not kept: it may hold a broken state),
    never hiding the save's own error."""
    with contextlib.suppress(Exception):
        checkpointer.close()


# ------------------------------------------------------------------ processes


_BARRIER_MS = 3_600_000  # a slow process may take long to write its shards


def coordinated() -> bool:
    """Whether a directory save may wait for the other processes in a background
    thread: one process, or processes with a distributed client (``jax.distributed``
    initialized), whose coordination service makes the barriers. Without one, the
    barriers are device collectives, which only the thread that runs the program's
    other collectives may call (``save_async`` of a directory then still runs them in
    its thread: the caller must run no collective until it is complete)."""
    if jax.process_count() == 1:
        return True
    try:
        _ocp().multihost.get_jax_distributed_client()
    except Exception:  # jax.distributed not initialized
        return False
    return True


def _barrier(name: str) -> None:
    """Wait for every process at the barrier ``name`` (unique to one save).

    The distributed runtime's barrier (its coordination service, as Orbax's own
    background thread waits), never a device collective: a ``save_async`` waits at
    these in its thread while training runs collectives in the main one, and a
    collective there would meet the training's in a different order in each process.
    A program whose processes have no distributed client (``jax.distributed`` not
    initialized) falls back to Orbax's barrier of a device collective."""
    if jax.process_count() == 1:
        return
    multihost = _ocp().multihost
    if not coordinated():
        multihost.sync_global_processes(name)
        return
    multihost.get_barrier_sync_fn()(key=name, timeout_ms=_BARRIER_MS)


def _agreed_name(save: int) -> str:
    """A fresh version name, process 0's, known to every process (through the
    distributed runtime's key-value store: no device collective, so any thread may)."""
    name = f"v-{atomic.host()}-{os.getpid()}-{secrets.token_hex(8)}"
    if jax.process_count() == 1:
        return name
    client = _ocp().multihost.get_jax_distributed_client()
    key = f"pytreemod-save-{save}-version"
    if jax.process_index() == 0:
        client.key_value_set(key, name)
        return name
    return client.blocking_key_value_get(key, 600_000)


def _gather_json(folder: str, mine: dict[str, str], name: str) -> dict[str, str]:
    """Every process's ``mine`` merged, on process 0 (through files in ``folder``)."""
    if jax.process_count() == 1:
        return mine
    me = jax.process_index()
    _write_json(os.path.join(folder, f".{name}.{me}.json"), mine)
    _barrier(f"pytreemod-{os.path.basename(folder)}-{name}")
    merged: dict[str, str] = {}
    if me == 0:
        for p in range(jax.process_count()):
            part = os.path.join(folder, f".{name}.{p}.json")
            with open(part) as f:
                merged.update(json.load(f))
            os.unlink(part)
    return merged


def _write_json(path: str, doc: Any) -> None:
    atomic.replace(path, lambda tmp: _dump(tmp, doc), sync=True)


def _dump(file: str, doc: Any) -> None:
    with open(file, "w") as f:
        json.dump(doc, f)


# ------------------------------------------------------------------- checksums


_buffers: queue.SimpleQueue[memoryview] = queue.SimpleQueue()


def _hash_file(file: str) -> str:
    """The checksum of ``file``, read into a buffer kept for the next file (and the next
    save or load): a fresh ``bytes`` per read, or a fresh buffer per thread of a new
    pool, is fresh memory the OS maps and faults in each time (for files of several MiB,
    as much time as the read)."""
    try:
        buffer = _buffers.get_nowait()
    except queue.Empty:
        buffer = memoryview(bytearray(_CHUNK))
    try:
        h = cfile.hasher()
        fd = os.open(file, os.O_RDONLY)
        try:
            while n := os.readv(fd, [buffer]):
                h.update(buffer[:n])
        finally:
            os.close(fd)
        return cfile.hex_of(h)
    finally:
        _buffers.put(buffer)


def _files(folder: str) -> Iterator[str]:
    """Every file of a version (relative, '/'-separated), but pytreemod's own."""
    for root, _, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), folder).replace(os.sep, "/")
            if rel != MANIFEST and not n.startswith("."):
                yield rel


def _chunk_owners(arrays: dict[str, Any]) -> dict[str, int]:
    """``"t3/1.0" -> process``: the shard files each process writes (the process of the
    first device holding each shard), as Orbax names them."""
    owners: dict[str, int] = {}
    for name, array in arrays.items():
        sharding = getattr(array, "sharding", None)
        if not isinstance(array, jax.Array) or sharding is None:
            continue
        indices = sharding.devices_indices_map(array.shape)
        for device in sorted(indices, key=lambda d: d.id):
            index = indices[device]
            parts = []
            for axis, s in enumerate(index):
                start, stop, _ = s.indices(array.shape[axis])
                parts.append(str(start // (stop - start)) if stop > start else "0")
            owners.setdefault(f"{name}/{'.'.join(parts) or '0'}", device.process_index)
    return owners


def _hash_mine(folder: str, owners: dict[str, int]) -> dict[str, str]:
    """The checksums of the files this process hashes: its shards (``owners``, from
    ``_chunk_owners``); process 0 also every file no process writes as a shard (Orbax's
    metadata, unpredicted names)."""
    me = jax.process_index()
    mine = [rel for rel in _files(folder) if owners.get(rel, 0) == me]
    sums = _parallel(_hash_file, [os.path.join(folder, rel) for rel in mine])
    return {rel: h for rel, h in zip(mine, sums) if h is not None}


def _parallel(fn: Callable[[str], str | None], files: list[str]) -> list[str | None]:
    """``fn`` of every file, on a thread per core, at most 4 (reads and XXH3 release the
    GIL; more threads than cores cost CPU time and buy nothing)."""
    threads = min(4, os.cpu_count() or 1, len(files))
    if threads < 2:
        return [fn(f) for f in files]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, files))


def _hash_or_none(file: str) -> str | None:
    try:
        return _hash_file(file)
    except OSError:
        return None


# ------------------------------------------------------------------------ save


def save_dir(
    path: str, header: fmt.Header, arrays: dict[str, Any], *, background: bool = False
) -> Callable[[], None]:
    """Start writing the directory checkpoint of ``header``'s entries, ``arrays`` by
    tensor key (global ``jax.Array``s or host arrays; empty ones are not stored), and
    return the function that completes it (hashes, manifest, commit).

    The arrays are copied off the devices before this returns; with ``background``, Orbax
    writes them in its own threads meanwhile (the returned function waits for it)."""
    ocp = _ocp()
    if os.path.exists(path) and not (os.path.isdir(path) and _reusable(path)):
        raise CheckpointError(
            f"Cannot save {path!r}: a {'folder' if os.path.isdir(path) else 'file'} of that "
            "name is in the way (a checkpoint directory is a folder of pytreemod's own). "
            "Remove it or pick another name."
        )
    with _failures(path, None):
        if jax.process_index() == 0:
            os.makedirs(path, exist_ok=True)
        save = next(_SAVES)
        _barrier(f"pytreemod-save-{save}")
        version = _agreed_name(save)
    folder = os.path.join(path, version)
    names = {k: f"t{i}" for i, k in enumerate(sorted(arrays)) if np.size(arrays[k])}
    stored = {names[k]: arrays[k] for k in names}
    checkpointer = _checkpointer(ocp, background)
    try:
        with _failures(path, folder), absl_notices_at_debug():
            checkpointer.save(folder, args=ocp.args.PyTreeSave(stored))
    except BaseException:
        _close(checkpointer)
        raise
    if not background:
        _idle[False].put(checkpointer)  # for the next save
    # which process hashes which shard file, known now: ``finish`` holds no array (in the
    # background, the saved arrays' device memory is freed as soon as training drops them)
    owners = _chunk_owners(stored)

    def finish() -> None:
        with _failures(path, folder):
            if background:
                try:
                    with absl_notices_at_debug():
                        checkpointer.wait_until_finished()
                except BaseException:
                    _close(checkpointer)
                    raise
                _idle[True].put(checkpointer)
            _barrier(f"pytreemod-{version}-written")
            sums = _gather_json(folder, _hash_mine(folder, owners), "checksums")
            if jax.process_index() == 0:
                _commit(path, version, header, names, sums)
            _barrier(f"pytreemod-{version}-done")

    return finish


def discard(folder: str, *, with_folder: bool = False) -> None:
    """Remove what a failed Orbax save of ``folder`` left: its temporary folders (and
    ``folder`` itself, ``with_folder``); process 0's work (the others write inside)."""
    if jax.process_index() == 0:
        strays = glob.glob(glob.escape(folder) + ".orbax-checkpoint-tmp*")
        for stray in ([folder] if with_folder else []) + strays:
            shutil.rmtree(stray, ignore_errors=True)


@contextlib.contextmanager
def _failures(path: str, folder: str | None) -> Iterator[None]:
    """Failures of a directory save as ``CheckpointError``s naming ``path``; the new
    version (``folder``), incomplete, removed."""
    try:
        yield
    except BaseException as e:
        if folder is not None:
            discard(folder, with_folder=True)
        if isinstance(e, CheckpointError) or not isinstance(e, Exception):
            raise
        cause = e if isinstance(e, OSError) else e.__cause__
        if isinstance(cause, OSError):
            raise atomic.failure(path, cause) from e
        raise CheckpointError(
            f"Cannot save {path!r}: Orbax failed ({type(e).__name__}: {e})."
        ) from e


def _commit(
    path: str, version: str, header: fmt.Header, names: dict[str, str], sums: dict[str, str]
) -> None:
    """Write the manifest of ``version``, point ``CHECKPOINT`` at it, remove the old."""
    doc = json.loads(header.to_metadata(dict.fromkeys(header.entries, ""))[fmt.FORMAT])
    for entry in doc["entries"].values():
        del entry["chunk_checksums"]
    doc["version"] = 1  # the entries, without a file's checksums
    manifest = {"format": FORMAT, "version": VERSION, "header": doc}
    manifest["arrays"] = names
    manifest["files"] = sums
    manifest["chunks"] = _chunk_shapes(os.path.join(path, version), names.values())
    _write_json(os.path.join(path, version, MANIFEST), _signed(manifest))
    previous = _current(path)
    _write_json(os.path.join(path, POINTER), {"format": FORMAT, "current": version})
    _remove_versions(path, keep=version, previous=previous)


def _chunk_shapes(folder: str, names: Any) -> dict[str, list[int]]:
    """Each array's chunk (shard file) shape, as Orbax recorded it in its ``.zarray``."""
    out: dict[str, list[int]] = {}
    for name in names:
        try:
            with open(os.path.join(folder, name, ".zarray")) as f:
                chunks = json.load(f)["chunks"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(chunks, list) and all(type(c) is int and c > 0 for c in chunks):
            out[name] = chunks
    return out


def _reusable(path: str) -> bool:
    return is_checkpoint_dir(path) or not os.listdir(path)


def _current(path: str) -> str | None:
    try:
        with open(os.path.join(path, POINTER)) as f:
            doc = json.load(f)
        return doc["current"] if isinstance(doc, dict) else None
    except (OSError, ValueError, KeyError):
        return None


def _remove_versions(path: str, keep: str, previous: str | None) -> None:
    """Remove the previous version and the versions of writers that are gone."""
    now = time.time()
    for entry in os.scandir(path):
        match = _VERSION_DIR.fullmatch(entry.name)
        if match is None or entry.name == keep or not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name == previous:
            stale = True
        elif match.group("host") == atomic.host():
            stale = not atomic.running(int(match.group("pid")))
        else:
            stale = now - entry.stat().st_mtime > atomic.STALE_SECONDS
        if stale:
            shutil.rmtree(entry.path, ignore_errors=True)


def _signed(manifest: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return {"checksum": cfile.label(cfile.digest_bytes(body.encode())), "manifest": manifest}


# ------------------------------------------------------------------------ load


class Manifest:
    """A verified manifest: the header, the Orbax array of each entry, file checksums."""

    def __init__(self, path: str):
        self.path = path
        version = _current(path)
        if version is None or not _VERSION_DIR.fullmatch(version):
            raise self.fail(f"{POINTER} does not name a version of the checkpoint")
        self.folder = os.path.join(path, version)
        try:
            with open(os.path.join(self.folder, MANIFEST), "rb") as f:
                signed = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            raise self.fail(f"the version {version!r} or its {MANIFEST} is missing") from None
        except (ValueError, RecursionError):
            raise self.fail(f"{MANIFEST} is not valid JSON") from None
        if not isinstance(signed, dict) or not isinstance(signed.get("manifest"), dict):
            raise self.fail(f"{MANIFEST} is not a pytreemod manifest")
        manifest = signed["manifest"]
        body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        if signed.get("checksum") != cfile.label(cfile.digest_bytes(body)):
            raise cfile.damaged(path, f"the bytes of {MANIFEST} do not match their checksum")
        if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
            raise self.fail(f"{MANIFEST} is not a version {VERSION} {FORMAT} manifest")
        names, files = manifest.get("arrays"), manifest.get("files")
        if not (_str_map(names) and _str_map(files)):
            raise self.fail(f"{MANIFEST}'s 'arrays' or 'files' is malformed")
        self.names: dict[str, str] = names
        self.files: dict[str, str] = files
        chunks = manifest.get("chunks", {})
        if not isinstance(chunks, dict) or not all(
            isinstance(c, list) and all(type(n) is int and n > 0 for n in c)
            for c in chunks.values()
        ):
            raise self.fail(f"{MANIFEST}'s 'chunks' is malformed")
        self.chunks: dict[str, list[int]] = chunks
        self.header = self._header(manifest.get("header"))

    def fail(self, problem: str) -> CheckpointFormatError:
        return CheckpointFormatError(
            f"{self.path!r}: {problem}. The checkpoint directory is damaged or incomplete; "
            "nothing was loaded. Restore it from a copy or an earlier checkpoint."
        )

    def _header(self, doc: Any) -> fmt.Header:
        """The entries, parsed by the single-file format's strict parser against the
        tensors a file would hold for them."""
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
            raise self.fail(f"{MANIFEST} has no header")
        tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
        for key, raw in doc["entries"].items():
            shape, dtype = raw.get("shape"), raw.get("dtype") if isinstance(raw, dict) else None
            if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
                raise self.fail(f"entry {key!r} has no valid shape")
            tensors[key] = _virtual(raw.get("encoding"), dtype, tuple(shape), raw.get("key_impl"))
        metadata = {"format": fmt.FORMAT, fmt.FORMAT: json.dumps(doc)}
        return fmt.parse_header(metadata, tensors, repr(self.path))

    def verify(self, targets: dict[str, jax.ShapeDtypeStruct]) -> None:
        """Check the checksum of every file this process reads to restore ``targets``
        (tensor key -> shape, dtype, sharding): the shard files that overlap its own
        shards, and the metadata; the processes agree on the result. Raise a
        ``CheckpointFormatError`` naming the first damaged file's model path.

        Done before Orbax reads anything (not while it restores): a damaged shard file
        must reach no decoder, and an Orbax restore that fails midway leaves its
        coroutines behind."""
        by_name = {name: key for key, name in self.names.items()}
        files = sorted(self.files)
        mine = self._files_read(targets)
        count = jax.process_count()
        read = [rel for rel in files if rel in mine]
        sums = _parallel(_hash_or_none, [os.path.join(self.folder, *r.split("/")) for r in read])
        bad = next((files.index(r) for r, h in zip(read, sums) if h != self.files[r]), -1)
        if count > 1:
            from jax.experimental import multihost_utils

            found = np.asarray(multihost_utils.process_allgather(np.array([bad], np.int64)))
            bad = next((int(b) for b in found.reshape(-1) if b >= 0), -1)
        if bad < 0:
            return
        rel = files[bad]
        key = by_name.get(rel.split("/")[0])
        entry = self.header.entries.get(key) if key is not None else None
        what = (
            f"{format_path(entry.path)} (its shard file {rel!r})"
            if entry is not None
            else f"the checkpoint's file {rel!r}"
        )
        raise cfile.damaged(self.path, f"the stored bytes of {what} do not match their checksum")

    def _files_read(self, targets: dict[str, jax.ShapeDtypeStruct]) -> set[str]:
        """The files of the checkpoint this process reads to restore ``targets``."""
        arrays = {self.names[k]: t for k, t in targets.items() if k in self.names}
        stored = set(self.names.values())
        out: set[str] = set()
        for rel in self.files:
            name, _, chunk = rel.partition("/")
            if name not in stored or not chunk:
                out.add(rel)  # Orbax's metadata: read by every process
            elif name in arrays and _overlaps(chunk, self.chunks.get(name), arrays[name]):
                out.add(rel)
        return out


def _overlaps(chunk: str, shape: list[int] | None, target: jax.ShapeDtypeStruct) -> bool:
    """Whether the shard file ``chunk`` ("1.0": its position in the grid of chunks of
    ``shape``) holds data of one of this process's shards of ``target``."""
    parts = chunk.split(".")
    if shape is None or not all(p.isdigit() for p in parts) or len(parts) != len(shape):
        return True  # metadata (.zarray), a scalar's single chunk, or an unknown layout
    return any(
        all(
            int(p) * size < stop and start < (int(p) + 1) * size
            for p, size, (start, stop) in zip(parts, shape, bounds)
        )
        for bounds in _my_shards(target.sharding, target.shape)  # type: ignore[arg-type]
    )


@functools.lru_cache(maxsize=64)
def _my_shards(
    sharding: jax.sharding.Sharding, shape: tuple[int, ...]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The distinct shards of this process's devices: each one's (start, stop) per axis
    (computed once per sharding and shape, not once per shard file)."""
    out: dict[tuple[tuple[int, int], ...], None] = {}
    for index in sharding.addressable_devices_indices_map(shape).values():
        out[_bounds(index, shape)] = None
    return tuple(out)


def _bounds(index: Any, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    index = tuple(index) if index is not None else ()
    index += (slice(None),) * (len(shape) - len(index))
    return tuple(s.indices(d)[:2] for s, d in zip(index, shape))


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _virtual(
    encoding: Any, dtype: Any, shape: tuple[int, ...], key_impl: Any
) -> tuple[str, tuple[int, ...]]:
    """The safetensors tensor a file would hold for an entry (for the shared parser)."""
    if encoding == "key" and isinstance(dtype, str):
        width = key_width(key_impl)
        return "U32", (*shape, width)
    if encoding == "bytes" and dtype in fmt.DTYPES:
        return "U8", (int(np.prod(shape)) * fmt.DTYPES[dtype].itemsize,)
    return cfile.CODES.get(str(dtype), "?"), shape


def key_width(impl: Any) -> int:
    try:
        return int(jax.random.key_data(jax.random.key(0, impl=impl)).shape[-1])
    except Exception:
        return 0


def _tensorstore() -> Any:
    try:
        import tensorstore
    except ImportError:
        _ocp()  # Orbax's message: TensorStore comes with it
        raise
    return tensorstore


_READ_AHEAD = 1 << 26  # bytes of arrays read ahead of their placement on the devices


def restore(manifest: Manifest, targets: dict[str, jax.ShapeDtypeStruct]) -> dict[str, jax.Array]:
    """The stored arrays of ``targets`` (tensor key -> shape, dtype and sharding), each
    in its sharding; empty arrays are made, not read.

    TensorStore (Orbax's storage layer) reads the zarr arrays Orbax wrote: of each, the
    parts this process's devices hold (a part held by several devices read once), the
    reads of the next arrays running while one is placed (``_read_ahead``: up to 64 MiB
    on the CPU, where the arrays read are the result; on an accelerator no more than the
    largest array, so that the host never stages more than that).
    Orbax's own restore does the same reads with a quarter to a third more CPU time (its
    bookkeeping per array and shard: more than verifying every file first costs,
    ``Manifest.verify``), and holds more host memory. Read only after that verification,
    no damaged byte reaches a decoder; a failure here (a file changed meanwhile) leaves
    nothing running: the reads are TensorStore's futures, cancelled."""
    ts = _tensorstore()
    context = ts.Context({"file_io_concurrency": {"limit": 128}})  # Orbax's
    spec = lambda name: {
        "driver": "zarr",
        "kvstore": {"driver": "file", "path": os.path.join(manifest.folder, name)},
    }
    out: dict[str, jax.Array] = {}
    limit = _read_ahead(targets)
    window: collections.deque[tuple[str, jax.ShapeDtypeStruct, dict[Any, Any]]]
    window = collections.deque()
    held = 0

    def place_first() -> None:
        nonlocal held
        key, target, reads = window.popleft()
        out[key] = _place(target, reads)
        held -= _nbytes(target)

    try:
        opened = {
            key: ts.open(spec(manifest.names[key]), context=context, open=True, read=True)
            for key in targets
            if key in manifest.names
        }
        for key, target in targets.items():
            if key not in opened:
                out[key] = jax.device_put(np.zeros(target.shape, target.dtype), target.sharding)
                continue
            while window and held + _nbytes(target) > limit:
                place_first()
            window.append((key, target, _read(opened[key].result(), target)))
            held += _nbytes(target)
        while window:
            place_first()
    except Exception as e:
        for _, _, reads in window:
            for read in reads.values():
                read.cancel()
        raise orbax_failure(manifest.path, e) from e
    return out


def _read_ahead(targets: dict[str, jax.ShapeDtypeStruct]) -> int:
    """Bytes of arrays whose reads may be in flight at once: ``_READ_AHEAD`` when every
    target lives on the CPU; else the largest target's (at least one array is read)."""
    default = {jax.devices()[0]}  # where a target without a sharding is placed
    devices = {d for t in targets.values() for d in getattr(t.sharding, "device_set", default)}
    if all(d.platform == "cpu" for d in devices):
        return _READ_AHEAD
    return min(_READ_AHEAD, max((_nbytes(t) for t in targets.values()), default=0))


def _nbytes(target: jax.ShapeDtypeStruct) -> int:
    return int(np.prod(target.shape)) * np.dtype(target.dtype).itemsize


def _read(store: Any, target: jax.ShapeDtypeStruct) -> dict[Any, Any]:
    """TensorStore's reads of the distinct shards of this process's devices."""
    shards = _my_shards(target.sharding, target.shape)  # type: ignore[arg-type]
    return {b: store[tuple(slice(*axis) for axis in b)].read() for b in shards}


def _place(target: jax.ShapeDtypeStruct, reads: dict[Any, Any]) -> jax.Array:
    """The global array of ``target`` from its read shards, each put on its devices."""
    dtype = np.dtype(target.dtype)
    parts = {b: np.asarray(read.result()) for b, read in reads.items()}
    indices = target.sharding.addressable_devices_indices_map(target.shape)  # type: ignore[union-attr]
    devices = list(indices)
    host = [parts[_bounds(indices[d], target.shape)] for d in devices]
    host = [h if h.dtype == dtype else h.astype(dtype) for h in host]
    shards = jax.device_put(host, devices)
    return jax.make_array_from_single_device_arrays(target.shape, target.sharding, shards)  # type: ignore[arg-type]
