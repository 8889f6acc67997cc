"""The bytes of a checkpoint file: a safetensors file written with checksums, and their check.

``write`` lays out an ordinary safetensors file (8-byte little-endian header length, the
JSON header padded with spaces to a multiple of 8, then the tensors' bytes) itself, so
that every tensor is hashed in the same pass that writes it, with no copy of the data:
each few chunks handed to the OS are hashed in a checksum thread while the next are
written (the file's writes release the GIL; so does the hash), still in the CPU's cache.
The header has a fixed size (checksums are fixed-width hex), so it is written last, over
a placeholder.

Checksums are XXH3 (64 bits) from the ``xxhash`` package: the fastest well-kept
non-cryptographic hash with a maintained Python binding (tens of GB/s on one core), made
for detecting accidental corruption, which is what a checksum here is for (it is no
defence against a forger, who can rewrite the checksums too).

Two kinds of checksum protect a file:

- each tensor's bytes, hashed in pieces, so that a process that reads only part of a
  tensor (its shards, in a multi-process load) reads the whole pieces that hold its part
  and verifies them, and every byte it uses is checked:

  - chunks, the entry's ``chunk_checksums``: ``xxh3_64/<chunk bytes>:`` then each
    chunk's hex, the tensor's bytes cut into runs of ``CHUNK_BYTES`` (the last one
    shorter; one for a small tensor). A load of the whole tensor verifies them as it
    reads, with no copy. (Version 3 files have only these. A shard that splits a later
    axis than the first of a large matrix holds a few bytes of every chunk.)
  - tiles (version 4), the entry's ``tile_checksums``, of a tensor of rank 2 or more above
    ``CHUNK_BYTES``: ``xxh3_64/<rows>x<tiles>:`` then each tile's hex, block by block,
    tile by tile. The tensor is rows (its last axis; the leading axes flattened), grouped
    in blocks of ``<rows>`` rows (about ``CHUNK_BYTES``; the last block shorter), each
    cut across its columns into ``<tiles>`` tiles of equal width: the most of 16, 8, 4, 2
    that divides the last axis into column blocks of at least ``MIN_TILE_ROW`` bytes
    (none: no tiles, the chunks serve every read). A tile's checksum is the XXH3 of its
    row segments one after another. A shard that splits the last axis into 2, 4, 8 or 16
    equal parts is whole tiles, one that splits leading axes whole blocks but at its ends.

  Hashing a tile gathers its rows into a buffer of one block (never a copy of the
  tensor), in a thread beside the one writing the file: the write waits in the kernel,
  releasing the GIL, while the blocks just written are gathered and hashed. (Version 2
  files have one ``checksum`` per tensor, over all its bytes: still read and verified.)
- the header's own, the first value of the safetensors metadata (``pytreemod.header``),
  over the 8-byte length and the header bytes with that value set to zeros. So a changed
  byte anywhere in the header, padding and tensor offsets included, is found too.

This module owns the checksum format for every checkpoint pytreemod writes (files and
directories alike): the hash family (``ALGORITHM``), its fixed-width hex encoding, the
labelled form ``xxh3_64:<hex>`` a header or manifest stores (``label``, ``unlabel``,
``CHECKSUM``) and the header key. Other modules hash and compare through these names,
never with literals of their own.
"""

import dataclasses
import json
import math
import os
import re
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np
import xxhash

from ._errors import CheckpointFormatError

ALGORITHM = "xxh3_64"
HEADER_KEY = "pytreemod.header"
_HEX = 16  # digits of a 64-bit checksum
ZERO = "0" * _HEX  # a placeholder of a checksum's width
CHECKSUM = re.compile(rf"{ALGORITHM}:[0-9a-f]{{{_HEX}}}")
"""A labelled checksum, as a header entry or a manifest stores it."""
CHUNK_CHECKSUMS = re.compile(
    rf"{ALGORITHM}/(?P<size>[1-9][0-9]{{0,15}}):(?P<sums>(?:[0-9a-f]{{{_HEX}}})*)"
)
"""Labelled chunk checksums: ``xxh3_64/<chunk bytes>:`` then each chunk's hex."""
TILE_CHECKSUMS = re.compile(
    rf"{ALGORITHM}/(?P<rows>[1-9][0-9]{{0,15}})x(?P<tiles>[1-9][0-9]{{0,3}}):"
    rf"(?P<sums>(?:[0-9a-f]{{{_HEX}}})*)"
)
"""Labelled tile checksums: ``xxh3_64/<rows>x<tiles>:`` then each tile's hex."""
CHUNK_BYTES = 1 << 20  # a chunk; about a block of tiles
TILE_COUNTS = (16, 8, 4, 2)  # tiles across a block: the most that fits
MIN_TILE_ROW = 512  # bytes of a tile's row at least: a narrower one saves no read
_PIECE = 1 << 22  # written, then its tiles hashed in the background, at a time
MAX_HEADER = 100_000_000  # safetensors' own limit
_PREFIX = b'{"__metadata__":{"' + HEADER_KEY.encode() + b'":"' + ALGORITHM.encode() + b":"

CODES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "uint16": "U16",
    "int16": "I16",
    "uint32": "U32",
    "int32": "I32",
    "uint64": "U64",
    "int64": "I64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "bfloat16": "BF16",
    "complex64": "C64",
}


def digest(data: np.ndarray) -> str:
    """The checksum of a C-contiguous array's bytes, as fixed-width hex."""
    return digest_bytes(_bytes(data))


def digest_bytes(data: bytes | memoryview) -> str:
    """The checksum of ``data``, as fixed-width hex."""
    return f"{xxhash.xxh3_64_intdigest(data):0{_HEX}x}"


def hasher() -> xxhash.xxh3_64:
    """An incremental hash: ``update`` it chunk by chunk, then ``hex_of`` it."""
    return xxhash.xxh3_64()


def hex_of(h: xxhash.xxh3_64) -> str:
    """The checksum an incremental hash has reached, as fixed-width hex."""
    return f"{h.intdigest():0{_HEX}x}"


def label(hex_sum: str) -> str:
    """A checksum in the stored, labelled form: ``xxh3_64:<hex>``."""
    return f"{ALGORITHM}:{hex_sum}"


def unlabel(checksum: str) -> str:
    """The hex of a labelled checksum (``CHECKSUM`` has matched it)."""
    return checksum.partition(":")[2]


def label_chunks(hex_sums: str, size: int = CHUNK_BYTES) -> str:
    """Chunk checksums (each chunk's hex, run together) in the stored, labelled form."""
    return f"{ALGORITHM}/{size}:{hex_sums}"


@dataclasses.dataclass(frozen=True)
class Layout:
    """The pieces a tensor's bytes are checksummed in: ``rows`` rows of ``row_bytes``
    bytes, in blocks of ``block_rows`` rows (the last one shorter), each block cut into
    ``tiles`` tiles of ``row_bytes // tiles`` bytes a row. Chunks of ``size`` bytes are
    rows of one byte in blocks of ``size``, one tile each."""

    rows: int
    row_bytes: int
    block_rows: int
    tiles: int
    tiled: bool  # labelled as tiles (a version 4 form), not as chunks

    @property
    def tile_row(self) -> int:
        """The bytes of one row of a tile."""
        return self.row_bytes // self.tiles

    @property
    def blocks(self) -> int:
        """How many blocks (none for no bytes)."""
        return -(-self.rows // self.block_rows) if self.row_bytes else 0

    def height(self, block: int) -> int:
        """The rows of block ``block`` (the last may have fewer)."""
        return min(self.block_rows, self.rows - block * self.block_rows)

    def label(self, hex_sums: str) -> str:
        """Checksums of these pieces (each one's hex, run together) in the stored form."""
        if self.tiled:
            return f"{ALGORITHM}/{self.block_rows}x{self.tiles}:{hex_sums}"
        return label_chunks(hex_sums, self.block_rows)


def chunk_layout(nbytes: int) -> Layout:
    """The chunks of ``CHUNK_BYTES`` a tensor of ``nbytes`` is hashed in."""
    return Layout(nbytes, 1, CHUNK_BYTES, 1, tiled=False)


def tile_layout(shape: tuple[int, ...], itemsize: int) -> Layout | None:
    """The tiles ``write`` also hashes a C-contiguous array of ``shape`` in: one of rank 2
    or more above ``CHUNK_BYTES`` whose last axis splits into tiles (``None`` for any
    other: a single tile a row would be whole rows, which its chunks already cover)."""
    nbytes = math.prod(shape) * itemsize
    if len(shape) < 2 or nbytes <= CHUNK_BYTES:
        return None
    row = shape[-1] * itemsize
    fits = [t for t in TILE_COUNTS if shape[-1] % t == 0 and row // t >= MIN_TILE_ROW]
    if not fits:
        return None
    return Layout(nbytes // row, row, max(1, CHUNK_BYTES // row), max(fits), True)


def labels(chunks: str, tiles: str | None) -> str:
    """A tensor's labelled chunk checksums and (if it has them) tile checksums, as one
    value of ``write``'s sums: separated by a space, which no label holds."""
    return chunks if tiles is None else f"{chunks} {tiles}"


def unlabels(value: str) -> tuple[str, str | None]:
    """The chunk checksums and tile checksums (``None``: none) of a ``labels`` value."""
    chunks, _, tiles = value.partition(" ")
    return chunks, tiles or None


@dataclasses.dataclass(frozen=True)
class Sums:
    """A tensor's stored checksums: its ``layout`` and every piece's hex, run together,
    block by block and tile by tile."""

    layout: Layout
    hexes: str

    def of(self, block: int, tile: int = 0) -> str:
        """The hex of tile ``tile`` of block ``block``."""
        at = (block * self.layout.tiles + tile) * _HEX
        return self.hexes[at : at + _HEX]


def parse_sums(labelled: str, shape: tuple[int, ...], itemsize: int) -> Sums:
    """The checksums ``labelled`` (``CHUNK_CHECKSUMS`` or ``TILE_CHECKSUMS`` has matched
    it) of a stored tensor of ``shape`` and ``itemsize``; a ``ValueError`` saying what
    does not fit the tensor."""
    match = CHUNK_CHECKSUMS.fullmatch(labelled) or TILE_CHECKSUMS.fullmatch(labelled)
    assert match is not None
    hexes = match["sums"]
    nbytes = math.prod(shape) * itemsize
    if "size" in match.groupdict():
        layout = Layout(nbytes, 1, int(match["size"]), 1, tiled=False)
        count = f"{nbytes} bytes are {layout.blocks} chunks of {layout.block_rows}"
    else:
        if len(shape) < 2 or not nbytes:
            raise ValueError(f"tile checksums of a tensor of shape {list(shape)} without rows")
        tiles = int(match["tiles"])
        if shape[-1] % tiles:
            raise ValueError(f"its last axis ({shape[-1]}) does not divide into {tiles} tiles")
        row = shape[-1] * itemsize
        layout = Layout(nbytes // row, row, int(match["rows"]), tiles, tiled=True)
        count = (
            f"{layout.rows} rows are {layout.blocks} blocks of {layout.block_rows} rows, "
            f"{tiles} tiles each"
        )
    found = len(hexes) // _HEX
    if found != layout.blocks * layout.tiles:
        kind = "tile" if layout.tiled else "chunk"
        raise ValueError(f"{found} {kind} checksums, but the tensor's {count}")
    return Sums(layout, hexes)


def block_hexes(rows: np.ndarray, layout: Layout, first: int, stop: int) -> list[str]:
    """The checksums of the pieces of blocks ``first:stop`` of ``rows`` (a tensor's bytes,
    a C-contiguous ``uint8`` array of ``layout.rows * layout.row_bytes``), as hex.

    The rows of a block's tiles are gathered, one tile after another, into a buffer of a
    block (never the tensor); a block of one tile is its bytes, hashed in place.
    """
    height, tiles, width = layout.block_rows, layout.tiles, layout.tile_row
    flat = rows.reshape(-1)
    if tiles == 1:
        step = height * layout.row_bytes
        return [digest_bytes(flat[b * step : (b + 1) * step].data) for b in range(first, stop)]
    cells = rows.reshape(layout.rows, layout.row_bytes).view(np.dtype((np.void, width)))
    scratch = np.empty(min(height, layout.rows) * layout.row_bytes, np.uint8)
    out = []
    for b in range(first, stop):
        h = layout.height(b)
        gathered = scratch[: h * layout.row_bytes]
        np.copyto(
            gathered.view(cells.dtype).reshape(tiles, h), cells[b * height : b * height + h].T
        )
        out += [
            digest_bytes(gathered[t * h * width : (t + 1) * h * width].data) for t in range(tiles)
        ]
    return out


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def in_background(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """``fn(*args)`` in pytreemod's checksum thread (one, made at first use): hashing
    beside a thread that reads or writes the file, whose system calls release the GIL."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="pytreemod-checksums")
        return _pool.submit(fn, *args)


def _forget_pool() -> None:
    """In a forked child, which has none of its parent's threads: a fresh thread later."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _bytes(data: np.ndarray) -> memoryview:
    return data.reshape(-1).view(np.uint8).data


def _order(tensors: Mapping[str, np.ndarray]) -> list[str]:
    """Largest items first, then by name: every tensor starts aligned to its item size."""
    return sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))


def _header(
    tensors: Mapping[str, np.ndarray],
    order: list[str],
    metadata: Mapping[str, str],
    header_sum: str,
) -> bytes:
    doc: dict[str, object] = {"__metadata__": {HEADER_KEY: label(header_sum), **metadata}}
    offset = 0
    for name in order:
        data = tensors[name]
        doc[name] = {
            "dtype": CODES[data.dtype.name],
            "shape": list(data.shape),
            "data_offsets": [offset, offset + data.nbytes],
        }
        offset += data.nbytes
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    assert text.startswith(_PREFIX)
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


MetadataOf = Callable[[Mapping[str, str]], dict[str, str]]
"""``metadata_of(sums)``: the safetensors metadata of a file whose tensors have the
checksums ``sums`` (labelled, chunks then tiles: ``labels``), by name."""


def write(file: str, tensors: Mapping[str, np.ndarray], metadata_of: MetadataOf) -> None:
    """Write ``tensors`` (C-contiguous, little-endian, dtypes in ``CODES``) to ``file``.

    ``metadata_of(sums)`` gives the safetensors metadata once every tensor's checksums
    are known; called first with placeholder sums of the same width, it must give
    metadata of the same length.
    """
    order = _order(tensors)
    tiles = {k: tile_layout(t.shape, t.dtype.itemsize) for k, t in tensors.items()}
    length = len(_header(tensors, order, metadata_of(_sums(tensors, tiles, {})), ZERO))
    hexes: dict[str, tuple[list[Future[str]], list[Future[list[str]]]]] = {}
    with open(file, "wb", buffering=0) as f:  # unbuffered: no copy in Python
        f.seek(length)
        for name in order:
            hexes[name] = _write_tensor(f, _bytes(tensors[name]), tiles[name])
        metadata = metadata_of(_sums(tensors, tiles, hexes))
        unsigned = _header(tensors, order, metadata, ZERO)
        if len(unsigned) != length:
            raise AssertionError("checkpoint header changed size")  # a bug, never the user's
        signed = _header(tensors, order, metadata, digest_bytes(unsigned))
        f.seek(0)
        _write_all(f, memoryview(signed))


def _write_tensor(
    f: BinaryIO, view: memoryview, tiles: Layout | None
) -> tuple[list[Future[str]], list[Future[list[str]]]]:
    """Write a tensor's bytes; after each few chunks are written, their checksums and
    those of the tiles they complete are computed in the checksum thread (the bytes still
    in the cache) while the next are written. The chunks' hex to come, and the tiles'."""
    chunks, pieces, first, hashed = [], [], 0, 0
    step = tiles.block_rows * tiles.row_bytes if tiles else 1
    rows = np.frombuffer(view, np.uint8)
    for start in range(0, len(view), CHUNK_BYTES):
        end = min(start + CHUNK_BYTES, len(view))
        _write_all(f, view[start:end])
        if end - hashed >= _PIECE or end == len(view):
            chunks.append(in_background(_chunk_hexes, view, hashed, end))
            hashed = end
        if tiles is not None:
            done = tiles.blocks if end == len(view) else end // step
            if done - first >= max(1, _PIECE // step) or done == tiles.blocks:
                pieces.append(in_background(block_hexes, rows, tiles, first, done))
                first = done
    return chunks, pieces


def _chunk_hexes(view: memoryview, start: int, stop: int) -> str:
    """The hex checksums of the chunks of ``view[start:stop]`` (``start`` a chunk's)."""
    return "".join(
        digest_bytes(view[at : min(at + CHUNK_BYTES, stop)])
        for at in range(start, stop, CHUNK_BYTES)
    )


def _sums(
    tensors: Mapping[str, np.ndarray],
    tiles: Mapping[str, Layout | None],
    hexes: Mapping[str, tuple[list[Future[str]], list[Future[list[str]]]]],
) -> dict[str, str]:
    """The labelled sums of ``write`` (placeholders of their width where ``hexes`` has none)."""
    out = {}
    for name, data in tensors.items():
        layout = tiles[name]
        if name in hexes:
            chunk_pieces, pieces = hexes[name]
            chunks = "".join(p.result() for p in chunk_pieces)
            tile_hexes = "".join(h for p in pieces for h in p.result())
        else:
            chunks = ZERO * chunk_layout(data.nbytes).blocks
            tile_hexes = ZERO * layout.blocks * layout.tiles if layout else ""
        out[name] = labels(label_chunks(chunks), layout.label(tile_hexes) if layout else None)
    return out


def _write_all(f: BinaryIO, view: memoryview) -> None:
    while len(view):
        view = view[f.write(view) or 0 :]


def starts_signed(file: str) -> bool:
    """Whether ``file`` starts as ``write`` starts a file (its header's checksum first):
    a look at its first bytes, never raising."""
    try:
        with open(file, "rb") as f:
            head = f.read(8 + len(_PREFIX))
    except OSError:
        return False
    return head[8:] == _PREFIX


def verify_header(file: str, metadata: Mapping[str, str]) -> bool:
    """Check the header checksum of a file whose metadata has one; ``False`` if it has none.

    Raises ``CheckpointFormatError`` naming ``file`` when the header bytes differ from the
    ones written.
    """
    stored = metadata.get(HEADER_KEY)
    if stored is None:
        return False
    with open(file, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = f.read(min(size, MAX_HEADER))
    raw = size.to_bytes(8, "little") + header
    start = 8 + len(_PREFIX)
    found = raw[start : start + _HEX].decode("ascii", "replace")
    if (
        not raw[8:].startswith(_PREFIX)
        or stored != label(found)
        or raw[start + _HEX : start + _HEX + 1] != b'"'
    ):
        raise damaged(file, "the header's checksum is not where pytreemod.save writes it")
    unsigned = raw[:start] + ZERO.encode() + raw[start + _HEX :]
    if digest_bytes(unsigned) != found:
        raise damaged(file, "the header's bytes do not match their checksum")
    return True


def verify_tensor(file: str, what: str, data: np.ndarray, expected: str) -> None:
    """Raise ``CheckpointFormatError`` naming ``what`` if ``data`` (as read from the file)
    does not hash to ``expected``."""
    if digest(np.ascontiguousarray(data)) != expected:
        raise damaged(file, f"the stored bytes of {what} do not match their checksum")


def damaged(file: str, problem: str) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"{file!r}: {problem}: the file was damaged after it was written (a changed or "
        "missing byte); nothing was loaded. Restore it from a copy or an earlier checkpoint."
    )
