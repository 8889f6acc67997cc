"""A multi-process load of one checkpoint file: each process reads only its own shards.

When ``like``'s leaf has a sharding over several processes, a process places only the
shards of its own devices, so it reads only their bytes, every one it uses verified
against a checksum (``_checkpoint_file``), and none twice.

A version 4 file stores a tensor of rank 2 or more above a MiB whose last axis splits
into tiles with checksums of tiles as well as of chunks (a load of all of it verifies
the chunks, with no copy): its rows (the last axis; the leading axes flattened) in
blocks of about a MiB, each block cut across the last axis into up to 16 tiles of equal
width. A shard is a box of rows (the runs of flattened rows its leading axes select) by
a range of columns (its slice of the last axis), so a process reads the tiles its shards
overlap: the tiles of the columns it holds, in the blocks of the rows it holds. A split
of the last axis into 2, 4, 8 or 16 equal parts (the tensor-parallel layout of a
kernel's output axis) is whole tiles, exactly its own bytes; one of a middle axis is the
blocks of its runs of rows. (Where every shard of the process is one run of whole rows,
a split of leading axes only, it is read by spans as below instead: its chunks hold
exactly its bytes but at the ends, and are read with no gather.) The tiles all shards of
the process need are gathered once, each checked as it is copied (``Reader.read_tiles``:
a strided copy from a map of the tensor per run of tiles in a block, not a system call
per row), and the shards cut out of them. (On a file system that cannot map the file, it
is read by spans as below.)

A tensor with chunk checksums only (a version 3 file, or a small or one-dimensional
tensor of version 4) is read by spans: for each distinct shard, the span of the file from
its first element to its last. The tensor is C-contiguous, so a shard that splits the
first axis (or leading axes, the rest whole) is exactly its bytes; one that splits a
later axis spans from its first row's start to its last row's end, the other shards'
rows between them included. Spans are merged and read in whole chunks, each checked as
it arrives. A tensor of a version 2 file (one checksum of all its bytes) is read whole
and checked; a file without checksums (a plain safetensors file, a version 1 one) is
read span by span, unchecked.

Processes verify different bytes, so they agree on the result (``agree``): a damaged
byte any of them finds is an error on all, naming the same tensor.
"""

import math
from typing import Any

import jax
import numpy as np

from . import _checkpoint_file as cfile
from . import _checkpoint_format as fmt
from . import _checkpoint_read as cread
from . import _checkpoint_tree as ctree


def part_sharding(entry: fmt.Entry, leaf: Any) -> jax.sharding.Sharding | None:
    """The sharding ``leaf`` (over several processes) places ``entry`` with, when this
    process reads only its part of it; ``None`` when it reads the whole tensor (one
    process, a key, a host array or number, a dtype JAX narrows)."""
    if jax.process_count() == 1 or entry.encoding == "key":
        return None
    if isinstance(leaf, np.ndarray | np.generic) or type(leaf) in ctree.SCALARS:
        return None
    dtype = fmt.DTYPES[entry.dtype]
    if jax.dtypes.canonicalize_dtype(dtype) != dtype:
        return None
    sharding = ctree.concrete_sharding(leaf)
    if sharding is None or sharding.is_fully_addressable:
        return None
    return sharding


def byte_span(
    shape: tuple[int, ...], itemsize: int, index: tuple[slice, ...]
) -> tuple[int, int] | None:
    """The bytes ``[begin, end)`` of a C-contiguous array that hold ``array[index]``,
    from its first element to its last; ``None`` for an empty shard."""
    bounds = [s.indices(d)[:2] for s, d in zip(index, shape)]
    bounds += [(0, d) for d in shape[len(bounds) :]]
    if any(stop <= start for start, stop in bounds):
        return None
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    first = sum(start * st for (start, _), st in zip(bounds, strides))
    last = sum((stop - 1) * st for (_, stop), st in zip(bounds, strides))
    return first * itemsize, (last + 1) * itemsize


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return out


def read_part(
    f: cread.Reader, entry: fmt.Entry, sharding: jax.sharding.Sharding, what: str
) -> jax.Array:
    """``entry``'s array over ``sharding``, of which this process reads and places only
    the shards of its own devices (checked as the module says)."""
    dtype = fmt.DTYPES[entry.dtype]
    shape = entry.shape
    indices = {
        device: _full(index, shape)
        for device, index in sharding.addressable_devices_indices_map(shape).items()
    }
    parts = None
    if entry.tile_checksums is not None and not _all_runs(shape, dtype.itemsize, indices):
        sums = f.sums(entry.key, entry.tile_checksums)
        try:
            parts = _tiled_parts(f, entry.key, sums, indices, dtype, what)
        except OSError:  # a file system that cannot map the file: its chunks, as below
            parts = None
    if parts is None:
        parts = _span_parts(f, entry, indices, shape, dtype, what)
    arrays, placed = [], set()
    for device, index in indices.items():
        key = _key(index, shape)
        part = parts[key] if key not in placed else parts[key].copy()  # memory of its own
        placed.add(key)
        arrays.append(jax.device_put(part, device))
    out = jax.make_array_from_single_device_arrays(shape, sharding, arrays)
    return jax.block_until_ready(out)  # the host copies die before the next tensor is read


Index = tuple[slice, ...]


def _key(index: Index, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """The same for the same shard, however its slices are spelled."""
    return tuple(s.indices(d) for s, d in zip(index, shape))


def _part_shape(shape: tuple[int, ...], index: Index) -> tuple[int, ...]:
    return tuple(len(range(*s.indices(d))) for s, d in zip(index, shape))


def _all_runs(shape: tuple[int, ...], itemsize: int, indices: dict[Any, Index]) -> bool:
    """Whether every shard is one run of whole rows (a split of leading axes only): its
    chunks then hold exactly its bytes but at the ends, read with no gather."""
    row = shape[-1] * itemsize
    regions = [_region(shape, itemsize, i) for i in indices.values()]
    return all(r is None or (len(r[0]) == 1 and r[1] == (0, row)) for r in regions)


def _span_parts(
    f: cread.Reader,
    entry: fmt.Entry,
    indices: dict[Any, Index],
    shape: tuple[int, ...],
    dtype: np.dtype,
    what: str,
) -> dict[Any, np.ndarray]:
    """Each distinct shard, from the merged spans that hold them (chunk checksums, one
    checksum of the tensor, or none)."""
    spans = {_key(i, shape): byte_span(shape, dtype.itemsize, i) for i in indices.values()}
    wanted = [s for s in spans.values() if s is not None]
    if entry.checksum is not None:  # a version 2 file: one checksum of all the bytes
        reads = [(f.read(entry.key, cfile.unlabel(entry.checksum), what), 0)]
    else:
        reads = [
            f.read_span(entry.key, begin, end, entry.chunk_checksums, what)
            for begin, end in _merged(wanted)
        ]
    return {
        _key(i, shape): _slice(reads, spans[_key(i, shape)], shape, dtype, i)
        for i in indices.values()
    }


def _tiled_parts(
    f: cread.Reader,
    name: str,
    sums: cfile.Sums,
    indices: dict[Any, Index],
    dtype: np.dtype,
    what: str,
) -> dict[Any, np.ndarray]:
    """Each distinct shard of tensor ``name``, cut from the tiles any of them overlaps."""
    layout = sums.layout
    shape = f.tensors[name][1]
    regions = {_key(i, shape): _region(shape, dtype.itemsize, i) for i in indices.values()}
    needed: dict[int, set[int]] = {}
    for region in regions.values():
        if region is not None:
            runs, (begin, end) = region
            tiles = range(begin // layout.tile_row, (end - 1) // layout.tile_row + 1)
            for first, stop in runs:
                for block in range(first // layout.block_rows, (stop - 1) // layout.block_rows + 1):
                    needed.setdefault(block, set()).update(tiles)
    tiles = f.read_tiles(name, sums, needed, what) if needed else {}
    parts = {}
    for key, index in ((_key(i, shape), i) for i in indices.values()):
        part_shape = _part_shape(shape, index)
        part = np.empty(part_shape, dtype)
        region = regions[key]
        if region is not None:
            _cut(part, region, tiles, layout)
        parts[key] = part
    return parts


Region = tuple[list[tuple[int, int]], tuple[int, int]]


def _region(shape: tuple[int, ...], itemsize: int, index: Index) -> Region | None:
    """The rows and bytes of each row that hold ``array[index]`` (rank 2 or more), as
    ``(runs, (begin, end))``: the runs ``[first, stop)`` of the leading axes' flattened
    rows it selects, in order, and the bytes of the last axis's slice; ``None`` if empty."""
    bounds = [s.indices(d)[:2] for s, d in zip(index, shape)]
    if any(stop <= start for start, stop in bounds):
        return None
    runs = [(0, 1)]  # of the rows of the axes so far (none: one row)
    for (start, stop), size in zip(bounds[:-1], shape[:-1]):
        if (start, stop) == (0, size):
            runs = [(first * size, stop_ * size) for first, stop_ in runs]
        else:
            runs = _merged(
                [(row * size + start, row * size + stop) for a, b in runs for row in range(a, b)]
            )
    start, stop = bounds[-1]
    return runs, (start * itemsize, stop * itemsize)


def _cut(
    part: np.ndarray, region: Region, tiles: dict[tuple[int, int], np.ndarray], layout: cfile.Layout
) -> None:
    """Fill ``part`` (C-contiguous) with its ``region`` of the tensor from ``tiles``."""
    runs, (begin, end) = region
    height, width = layout.block_rows, layout.tile_row
    out = part.reshape(-1).view(np.uint8).reshape(-1, end - begin)
    at = 0
    for first, stop in runs:
        for block in range(first // height, (stop - 1) // height + 1):
            top, bottom = max(first, block * height), min(stop, (block + 1) * height)
            rows = slice(at + top - first, at + bottom - first)
            for tile in range(begin // width, (end - 1) // width + 1):
                left, right = max(begin, tile * width), min(end, (tile + 1) * width)
                src = tiles[block, tile][top - block * height : bottom - block * height]
                out[rows, left - begin : right - begin] = src[
                    :, left - tile * width : right - tile * width
                ]
        at += stop - first


def _full(index: Any, shape: tuple[int, ...]) -> tuple[slice, ...]:
    index = tuple(index) if index is not None else ()
    return index + (slice(None),) * (len(shape) - len(index))


def _slice(
    reads: list[tuple[np.ndarray, int]],
    span: tuple[int, int] | None,
    shape: tuple[int, ...],
    dtype: np.dtype,
    index: tuple[slice, ...],
) -> np.ndarray:
    """``array[index]`` from the read spans that hold it."""
    part_shape = tuple(len(range(*s.indices(d))) for s, d in zip(index, shape))
    if span is None:
        return np.zeros(part_shape, dtype)
    data, start = next((d, s) for d, s in reads if s <= span[0] and span[1] <= s + len(d))
    flat = data[span[0] - start : span[1] - start].view(dtype)
    strides = tuple(math.prod(shape[i + 1 :]) * dtype.itemsize for i in range(len(shape)))
    view = np.lib.stride_tricks.as_strided(flat, part_shape, strides, writeable=False)
    return np.ascontiguousarray(view)


def agree(failure: int) -> int:
    """The first failure (a position in the order tensors are read; -1 for none) that
    any process found: every process calls it, from the main thread."""
    from jax.experimental import multihost_utils

    found = np.asarray(multihost_utils.process_allgather(np.array([failure], np.int64)))
    bad = [int(b) for b in found.reshape(-1) if b >= 0]
    return min(bad) if bad else -1
