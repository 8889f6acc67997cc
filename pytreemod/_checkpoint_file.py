"""The bytes of a checkpoint file: a safetensors file written with checksums, and their check.

``write`` lays out an ordinary safetensors file (8-byte little-endian header length, the
JSON header padded with spaces to a multiple of 8, then the tensors' bytes) itself, so
that every tensor is hashed in the same pass that writes it: each chunk is hashed while
it is in the CPU's cache, then handed to the OS, with no copy of the data. The header has
a fixed size (checksums are fixed-width hex), so it is written last, over a placeholder.

Checksums are XXH3 (64 bits) from the ``xxhash`` package: the fastest well-kept
non-cryptographic hash with a maintained Python binding (tens of GB/s on one core), made
for detecting accidental corruption, which is what a checksum here is for (it is no
defence against a forger, who can rewrite the checksums too).

Two kinds of checksum protect a file:

- each tensor's bytes, hashed in chunks of ``CHUNK_BYTES`` (the last one shorter): the
  entry's ``chunk_checksums``, labelled ``xxh3_64/<chunk bytes>:`` then every chunk's
  hex run together. A load verifies each chunk as it reads it; a process that reads
  only part of a tensor (its shards, in a multi-process load) reads the whole chunks
  that hold its part and verifies them, so every byte it uses is checked. (Version 2
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

import json
import re
from collections.abc import Callable, Mapping
from typing import BinaryIO

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
CHUNK_BYTES = 1 << 20  # hashed then written while in cache; the chunk of chunk checksums
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


def unlabel_chunks(labelled: str) -> tuple[int, list[str]]:
    """The chunk size and each chunk's hex of labelled chunk checksums
    (``CHUNK_CHECKSUMS`` has matched them)."""
    size, _, sums = labelled.partition("/")[2].partition(":")
    return int(size), [sums[i : i + _HEX] for i in range(0, len(sums), _HEX)]


def chunk_count(nbytes: int, size: int = CHUNK_BYTES) -> int:
    """How many chunks of ``size`` bytes hold ``nbytes`` (the last may be short)."""
    return -(-nbytes // size)


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
chunk checksums ``sums`` (every chunk's hex run together, by name)."""


def write(file: str, tensors: Mapping[str, np.ndarray], metadata_of: MetadataOf) -> None:
    """Write ``tensors`` (C-contiguous, little-endian, dtypes in ``CODES``) to ``file``.

    ``metadata_of(sums)`` gives the safetensors metadata once every tensor's chunk
    checksums are known; called first with placeholder sums of the same width, it must
    give metadata of the same length.
    """
    order = _order(tensors)
    draft = {k: ZERO * chunk_count(t.nbytes) for k, t in tensors.items()}
    length = len(_header(tensors, order, metadata_of(draft), ZERO))
    sums: dict[str, str] = {}
    with open(file, "wb", buffering=0) as f:  # unbuffered: no copy in Python
        f.seek(length)
        for name in order:
            view = _bytes(tensors[name])
            parts = []
            for start in range(0, len(view), CHUNK_BYTES):
                chunk = view[start : start + CHUNK_BYTES]
                parts.append(digest_bytes(chunk))  # hashed, then written from the cache
                _write_all(f, chunk)
            sums[name] = "".join(parts)
        metadata = metadata_of(sums)
        unsigned = _header(tensors, order, metadata, ZERO)
        if len(unsigned) != length:
            raise AssertionError("checkpoint header changed size")  # a bug, never the user's
        signed = _header(tensors, order, metadata, digest_bytes(unsigned))
        f.seek(0)
        _write_all(f, memoryview(signed))


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
