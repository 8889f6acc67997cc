"""A multi-process load of one checkpoint file: each process reads only its own shards.

When ``like``'s leaf has a sharding over several processes, a process places only the
shards of its own devices, so it reads only their bytes: for each distinct shard (an
index into the array), the span of the file from the shard's first element to its last.
The tensor is C-contiguous, so a shard that splits the first axis (or leading axes,
the rest whole) is exactly its bytes; one that splits a later axis spans from its first
row's start to its last row's end (the rows of the other shards between them are read
too: one read instead of a read per row, which on a disk costs more than the bytes).
Spans of the shards a process holds are merged, so no byte is read twice.

Every byte used is verified: a file has a checksum per chunk of every tensor
(``_checkpoint_file``), and a process reads the whole chunks that hold its spans, each
checked as it arrives. A tensor of a version 2 file (one checksum of all its bytes) is
read whole and checked; a file without checksums (a plain safetensors file, a version 1
one) is read span by span, unchecked. Processes verify different bytes, so they agree
on the result (``agree``): a damaged byte any of them finds is an error on all, naming
the same tensor.
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
    indices = sharding.addressable_devices_indices_map(shape)
    spans = {
        device: byte_span(shape, dtype.itemsize, _full(index, shape))
        for device, index in indices.items()
    }
    wanted = [s for s in spans.values() if s is not None]
    if entry.checksum is not None:  # a version 2 file: one checksum of all the bytes
        reads = [(f.read(entry.key, cfile.unlabel(entry.checksum), what), 0)]
    else:
        reads = [
            f.read_span(entry.key, begin, end, entry.chunk_checksums, what)
            for begin, end in _merged(wanted)
        ]
    arrays = []
    for device, index in indices.items():
        part = _slice(reads, spans[device], shape, dtype, _full(index, shape))
        arrays.append(jax.device_put(part, device))
    out = jax.make_array_from_single_device_arrays(shape, sharding, arrays)
    return jax.block_until_ready(out)  # the host copies die before the next tensor is read


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
