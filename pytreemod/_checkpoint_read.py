"""Reading a safetensors file one tensor at a time, with plain reads and no memory map.

``safetensors.safe_open`` maps the whole file into memory: every page a load touches
stays resident in the process until the file is closed, so loading a model costs the
file's size in the page cache *and* in the process, twice the model. ``Reader`` reads
each tensor with ``readinto`` into a buffer of its own size, hashing each chunk as it
arrives (while it is in the CPU's cache), so a load holds the placed arrays plus one
tensor on the host at a time: the model plus its largest tensor on the CPU backend, only
the largest tensor when arrays are placed on an accelerator.

A process that needs only some tiles of a tensor (``_checkpoint_part``) takes them from a
memory map of that tensor's bytes alone, unmapped once they are copied: one strided copy
per run of tiles in a block, where reading each tile's rows would be a system call per
row. (A file cut while it is mapped would fault: ``safetensors.safe_open`` maps the
whole file the same way.) Every byte taken from the file is counted in ``bytes_read``.

The header is parsed here with the checks safetensors makes (a bounded header length,
JSON with string metadata, known dtypes, tensors that tile the data section exactly), so a
cut, appended or malformed file is a ``CheckpointFormatError`` naming the file.
"""

import json
import math
import mmap
import os
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from . import _checkpoint_file as cfile
from ._errors import CheckpointFormatError

# Bits per element of every safetensors dtype code (sub-byte ones pack several a byte).
BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U16": 16,
    "I16": 16,
    "F16": 16,
    "BF16": 16,
    "U32": 32,
    "I32": 32,
    "F32": 32,
    "U64": 64,
    "I64": 64,
    "F64": 64,
    "C64": 64,
}
_CHUNK = 1 << 22  # read, then hashed while in cache
_OWN_MAP = 1 << 20  # tensors of this size and more are read into a map of their own


def buffer(nbytes: int) -> np.ndarray:
    """A flat ``uint8`` array of ``nbytes``; a large one in memory of its own (an anonymous
    map), returned to the OS the moment the array dies. A buffer from ``malloc`` would
    come back into the heap, which keeps a few freed tensors' worth of memory in the
    process; and JAX's CPU backend takes a page-aligned buffer as the array's memory
    without a copy."""
    if nbytes < _OWN_MAP or os.name != "posix":
        return np.empty(nbytes, np.uint8)
    # populated when made: the kernel fills all its pages at once, twice as fast as one
    # page fault at a time as the read first touches them
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0) | getattr(mmap, "MAP_POPULATE", 0)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), np.uint8)


def unreadable(file: str, problem: str) -> CheckpointFormatError:
    """The error of a file that is not a safetensors file, saying what is wrong."""
    return CheckpointFormatError(
        f"{file!r}: cannot be read as a safetensors checkpoint: {problem}. The file "
        "is truncated, corrupted or not a checkpoint; nothing was loaded."
    )


class Reader:
    """An open safetensors file: ``metadata``, ``tensors`` (``name -> (code, shape)``),
    and ``read(name)`` of one tensor's bytes, checked against a checksum when given."""

    def __init__(self, file: str):
        self.file = file
        self.bytes_read = 0  # of tensor data, read or copied from a map
        self._f = open(file, "rb", buffering=0)  # closed by close()
        try:
            self._parse()
        except BaseException:
            self._f.close()
            raise

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def _fail(self, problem: str) -> CheckpointFormatError:
        return unreadable(self.file, problem)

    def _parse(self) -> None:
        size = os.fstat(self._f.fileno()).st_size
        head = self._f.read(8)
        if len(head) < 8:
            raise self._fail(f"{size} bytes, shorter than the 8-byte header length")
        length = int.from_bytes(head, "little")
        if length > cfile.MAX_HEADER or 8 + length > size:
            raise self._fail(f"the header length {length} does not fit a {size}-byte file")
        raw = self._f.read(length)
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            raise self._fail(f"the header is not valid JSON ({type(e).__name__})") from None
        if not isinstance(doc, dict):
            raise self._fail("the header is not a JSON object")
        metadata = doc.pop("__metadata__", None)
        if metadata is not None and not (
            isinstance(metadata, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        ):
            raise self._fail("'__metadata__' is not a map of strings to strings")
        self.metadata: dict[str, str] | None = metadata
        self.data_start = 8 + length
        self.tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
        self._spans: dict[str, tuple[int, int]] = {}
        for name, info in doc.items():
            self._tensor(name, info)
        end = 0
        for name, (begin, stop) in sorted(self._spans.items(), key=lambda kv: kv[1]):
            if begin != end:
                raise self._fail(f"tensor {name!r} does not start where the previous one ends")
            end = stop
        if self.data_start + end != size:
            raise self._fail(
                f"the tensors hold {end} bytes but the file has {size - self.data_start} after "
                "the header"
            )

    def _tensor(self, name: str, info: Any) -> None:
        if not isinstance(info, dict):
            raise self._fail(f"tensor {name!r} is not described by a JSON object")
        code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(code, str) or code not in BITS:
            raise self._fail(f"tensor {name!r} has the unknown dtype {code!r}")
        if not (
            isinstance(shape, list)
            and len(shape) <= 64
            and all(type(d) is int and 0 <= d < 2**62 for d in shape)
        ):
            raise self._fail(f"tensor {name!r} has an invalid shape")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int and 0 <= o for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise self._fail(f"tensor {name!r} has invalid data offsets")
        bits = math.prod(shape) * BITS[code]
        if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
            raise self._fail(
                f"tensor {name!r}: {code}{shape} is not {offsets[1] - offsets[0]} bytes"
            )
        self.tensors[name] = (code, tuple(shape))
        self._spans[name] = (offsets[0], offsets[1])

    def read(
        self,
        name: str,
        checksum: str | None = None,
        what: str = "",
        chunk_sums: str | None = None,
    ) -> np.ndarray:
        """The bytes of tensor ``name`` as a flat ``uint8`` array of their own, checked
        as they arrive against ``chunk_sums`` (labelled chunk checksums) or ``checksum``
        (hex, of all its bytes) when given: a difference raises
        ``CheckpointFormatError`` naming ``what``."""
        if chunk_sums is not None:
            return self.read_span(name, 0, self.nbytes(name), chunk_sums, what)[0]
        begin, stop = self._spans[name]
        out = buffer(stop - begin)
        h = cfile.hasher() if checksum is not None else None
        self._f.seek(self.data_start + begin)
        for start in range(0, len(out), _CHUNK):
            piece = out.data[start : start + _CHUNK]
            self._fill(piece, name)
            if h is not None:
                h.update(piece)
        if h is not None and cfile.hex_of(h) != checksum:
            raise self._damaged(what)
        return out

    def nbytes(self, name: str) -> int:
        """The size of tensor ``name``'s bytes."""
        begin, stop = self._spans[name]
        return stop - begin

    def sums(self, name: str, labelled: str) -> cfile.Sums:
        """The labelled chunk or tile checksums of tensor ``name`` (the header's parse
        has checked that they fit it)."""
        code, shape = self.tensors[name]
        return cfile.parse_sums(labelled, shape, BITS[code] // 8)

    def _damaged(self, what: str) -> CheckpointFormatError:
        return cfile.damaged(self.file, f"the stored bytes of {what} do not match their checksum")

    def read_span(
        self, name: str, begin: int, end: int, chunk_sums: str | None, what: str
    ) -> tuple[np.ndarray, int]:
        """Bytes ``begin:end`` of tensor ``name`` (offsets in its bytes): ``(data,
        start)``, ``data`` starting at byte ``start`` of the tensor. With ``chunk_sums``
        (labelled), the whole chunks that hold the span are read, each checked against
        its checksum as it arrives (a difference raises ``CheckpointFormatError`` naming
        ``what``); without, exactly the span, unchecked."""
        size, sums = 0, None
        if chunk_sums:
            sums = self.sums(name, chunk_sums)
            assert not sums.layout.tiled, "tiles are read with read_tiles"
            size = sums.layout.block_rows * sums.layout.row_bytes
        nbytes = self.nbytes(name)
        if size:
            begin, end = begin - begin % size, min(nbytes, -(-end // size) * size)
        out = buffer(end - begin)
        self._f.seek(self.data_start + self._spans[name][0] + begin)
        step = size or _CHUNK
        for start in range(0, len(out), step):
            piece = out.data[start : start + step]
            self._fill(piece, name)
            if sums is not None and cfile.digest_bytes(piece) != sums.of((begin + start) // size):
                raise self._damaged(what)
        return out, begin

    def read_tiles(
        self, name: str, sums: cfile.Sums, needed: Mapping[int, Collection[int]], what: str
    ) -> dict[tuple[int, int], np.ndarray]:
        """The tiles ``needed`` (tile numbers by block) of tensor ``name``: ``(block, tile)
        -> rows x row bytes`` (``uint8``, C-contiguous), each checked against its checksum
        as it is copied (a difference raises ``CheckpointFormatError`` naming ``what``).
        The tiles next to each other in a block are copied from the map at once."""
        begin = self.data_start + self._spans[name][0]
        skip = begin % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(
            self._f.fileno(), skip + self.nbytes(name), access=mmap.ACCESS_READ, offset=begin - skip
        )
        try:
            out, copied = _copy_tiles(mapped, skip, sums, needed)
        finally:
            try:
                mapped.close()  # no array views it: _copy_tiles's are gone
            except BufferError:  # but for an error's traceback: the map goes with it
                pass
        self.bytes_read += copied
        if out is None:
            raise self._damaged(what)
        return out

    def _fill(self, view: memoryview, name: str) -> None:
        """Read ``len(view)`` bytes from the file's position into ``view``."""
        done = 0
        while done < len(view):
            n = self._f.readinto(view[done:])
            if not n:
                raise self._fail(f"the file ended inside tensor {name!r}")
            done += n
        self.bytes_read += done


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct ``numbers`` as ranges ``[first, stop)`` of consecutive ones."""
    out: list[tuple[int, int]] = []
    for n in numbers:
        if out and out[-1][1] == n:
            out[-1] = (out[-1][0], n + 1)
        else:
            out.append((n, n + 1))
    return out


def _copy_tiles(
    mapped: mmap.mmap, skip: int, sums: cfile.Sums, needed: Mapping[int, Collection[int]]
) -> tuple[dict[tuple[int, int], np.ndarray] | None, int]:
    """``Reader.read_tiles`` from the tensor's map (its bytes from ``skip``): the tiles, or
    ``None`` once one differs from its checksum, and the bytes copied. Raises nothing of
    its own, so that no view of the map outlives it."""
    layout = sums.layout
    width, height = layout.tile_row, layout.block_rows
    cells = np.frombuffer(mapped, np.dtype((np.void, width)), layout.rows * layout.tiles, skip)
    cells = cells.reshape(layout.rows, layout.tiles)
    runs = [(block, run) for block in sorted(needed) for run in _runs(sorted(needed[block]))]
    sizes = [(stop - first) * layout.height(block) * width for block, (first, stop) in runs]
    into = np.empty(sum(sizes), np.uint8)  # one: freed once the shards are cut from it
    out: dict[tuple[int, int], np.ndarray] = {}
    at = 0
    for (block, (first, stop)), size in zip(runs, sizes):
        h = layout.height(block)
        got = into[at : at + size]
        at += size
        rows = cells[block * height : block * height + h, first:stop]
        np.copyto(got.view(cells.dtype).reshape(stop - first, h), rows.T)
        for i, tile in enumerate(range(first, stop)):
            one = got[i * h * width : (i + 1) * h * width]
            if cfile.digest_bytes(one.data) != sums.of(block, tile):
                return None, at
            out[block, tile] = one.reshape(h, width)
    return out, at
