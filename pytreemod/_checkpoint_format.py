"""The header of a pytreemod checkpoint: how leaves are described, and strict parsing.

A checkpoint is one safetensors file. Its ``__metadata__`` holds ``format: pytreemod``
and, under the key ``pytreemod``, a JSON document::

    {"version": 4,
     "entries": {"blocks.3.mlp.kernel": {"path": ["blocks", 3, "mlp", "kernel"],
                                         "collection": "params", "variable": "Param",
                                         "dtype": "bfloat16", "shape": [4, 2],
                                         "encoding": "native", "key_impl": null,
                                         "boxes": [{"type": "pytreemod._meta.Partitioned",
                                                    "fields": {"names": ["embed", "mlp"]}}],
                                         "chunk_checksums": "xxh3_64/1048576:5f0c9d2e7a41b386"}},
     "aliases": {"head.kernel": {"path": ["head", "kernel"], "of": "embed.kernel"}}}

``encoding`` says how the tensor of the same name stores the value: ``native`` (its
safetensors dtype is the value's), ``bytes`` (a flat ``uint8`` tensor of the raw bytes,
for dtypes the ``safetensors.numpy`` reader cannot return: float8, int4, complex128...)
or ``key`` (the ``jax.random.key_data`` of a typed PRNG key array, rebuilt with
``key_impl``). A file is untrusted input: ``parse_header`` checks every field's type and
range, and that every entry has its tensor with a consistent dtype and size, so nothing
later can fail on a malformed value; no name in a file is ever imported or evaluated.

``chunk_checksums`` (version 3 and 4) are the checksums of the tensor's bytes, a chunk of
``_checkpoint_file.CHUNK_BYTES`` at a time (one for a small tensor, none for an empty
one), and ``tile_checksums`` (version 4, a tensor of rank 2 or more above a chunk) those
of its tiles: blocks of rows cut across the last axis (``xxh3_64/<rows>x<tiles>:``), so
that a process which reads only some of a tensor's bytes (a shard of any axis) verifies
them; ``_checkpoint_file`` owns their form (hash, hex, label, ``Layout``), writes and
checks them, and the checksum of the header itself. Version 3 files (chunks only) are
read as before; version 2 files (one ``checksum`` of all a tensor's bytes) are still
read and verified; version 1 files (written before checksums) are read unchecked.
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from . import _checkpoint_file as cfile
from ._errors import CheckpointFormatError

FORMAT = "pytreemod"
VERSION = 4  # 4: tile checksums; 3: chunks only; 2: one checksum a tensor; 1: none
MAX_RANK = 64
MAX_ELEMENTS = 2**62

_DTYPE_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "complex64",
    "complex128",
    "int2",
    "int4",
    "uint2",
    "uint4",
    "float4_e2m1fn",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)


def _known_dtypes() -> dict[str, np.dtype]:
    out: dict[str, np.dtype] = {}
    for name in _DTYPE_NAMES:
        try:
            out[name] = np.dtype(jnp.dtype(name))
        except TypeError:  # a dtype this ml_dtypes/jax version does not have
            continue
    return out


DTYPES = _known_dtypes()
"""Every array dtype a checkpoint may hold, by name (a fixed table: never parsed)."""

# The dtypes the safetensors.numpy reader returns, by their safetensors header code.
NATIVE_CODES: dict[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "BF16": "bfloat16",
    "C64": "complex64",
}
NATIVE = frozenset(NATIVE_CODES.values())
ENCODINGS = ("native", "bytes", "key")


@dataclasses.dataclass(frozen=True)
class BoxRecord:
    """One axis-metadata box around a value: its class's qualified name and fields."""

    type: str
    fields: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Entry:
    """What the header says about one stored value."""

    key: str
    path: tuple[str | int, ...]
    collection: str
    variable: str | None
    dtype: str
    shape: tuple[int, ...]
    encoding: str
    key_impl: str | None
    boxes: tuple[BoxRecord, ...]
    checksum: str | None = None  # version 2: labelled (cfile.label), of all the bytes
    chunk_checksums: str | None = None  # version 3 and 4: labelled (cfile.label_chunks)
    tile_checksums: str | None = None  # version 4, a large tensor: labelled (cfile.Layout)

    def to_json(self, sums: str) -> dict[str, Any]:
        """The entry's JSON, with the checksums ``sums`` (``cfile.labels``)."""
        chunks, tiles = cfile.unlabels(sums)
        return {
            "path": list(self.path),
            "collection": self.collection,
            "variable": self.variable,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "encoding": self.encoding,
            "key_impl": self.key_impl,
            "boxes": [{"type": b.type, "fields": b.fields} for b in self.boxes],
            "chunk_checksums": chunks,
        } | ({"tile_checksums": tiles} if tiles is not None else {})


@dataclasses.dataclass(frozen=True)
class Alias:
    """A place that shares (ties) the Variable stored under ``of``."""

    key: str
    path: tuple[str | int, ...]
    of: str


@dataclasses.dataclass(frozen=True)
class Header:
    entries: dict[str, Entry]
    aliases: dict[str, Alias]

    def to_metadata(self, sums: Mapping[str, str]) -> dict[str, str]:
        """The safetensors metadata, with ``sums[key]`` (labelled: ``cfile.labels``) as
        each entry's chunk (and tile) checksums."""
        doc = {
            "version": VERSION,
            "entries": {k: e.to_json(sums[k]) for k, e in self.entries.items()},
            "aliases": {k: {"path": list(a.path), "of": a.of} for k, a in self.aliases.items()},
        }
        return {"format": FORMAT, FORMAT: json.dumps(doc, allow_nan=False)}


def is_raw(metadata: Mapping[str, str] | None) -> bool:
    """A plain safetensors file: its metadata mentions neither pytreemod nor a checksum.

    A ``pm.save`` file names pytreemod in three places and its checksum algorithm once per
    tensor and once for the header, so a damaged one never passes for a raw file.
    """
    items = (metadata or {}).items()
    marks = (FORMAT, cfile.ALGORITHM)
    return not any(m in t for k, v in items for t in (k, v) for m in marks)


def tensor_key(path: tuple[Any, ...]) -> str:
    """The tensor name of a path: components joined by dots (``blocks.3.mlp.kernel``).

    Dots and backslashes inside a component are escaped with a backslash, so distinct
    paths of string keys get distinct names.
    """
    parts = []
    for k in path:
        text = str(k) if isinstance(k, int) else k
        parts.append(text.replace("\\", "\\\\").replace(".", "\\."))
    return ".".join(parts)


# ------------------------------------------------------------------ JSON of box fields

_UNSAVED = {"unsaved": True}


def encode_field(value: Any) -> Any:
    """JSON for a box field value: None/bool/int/float/str and nested tuples/lists of them.

    Anything else (a ``Mesh``, a function) is not stored; loading takes it from the box
    in ``like`` or the field's default.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, (tuple, list)):
        items = [encode_field(v) for v in value]
        if any(isinstance(i, dict) for i in items):
            return dict(_UNSAVED)
        return {"tuple": items}
    return dict(_UNSAVED)


def decode_field(value: Any) -> Any:
    """Inverse of ``encode_field`` on validated JSON (tuples come back as tuples)."""
    if isinstance(value, dict):
        return tuple(decode_field(v) for v in value["tuple"])
    return value


def is_unsaved(value: Any) -> bool:
    return isinstance(value, dict) and value.get("unsaved") is True


# ------------------------------------------------------------------------- parsing


class _Reader:
    """Typed access to untrusted JSON; every failure names the file and the field."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, where: str, problem: str) -> CheckpointFormatError:
        return CheckpointFormatError(
            f"{self.file}: {where}: {problem}. The file is not a valid pytreemod checkpoint "
            "(corrupted, truncated, or written by another program); nothing was loaded."
        )

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a JSON object, got {type(value).__name__}")
        return value

    def field(self, d: dict[str, Any], name: str, kind: Any, where: str) -> Any:
        if name not in d:
            raise self.fail(where, f"missing field {name!r}")
        value = d[name]
        if not _is_kind(value, kind):
            raise self.fail(where, f"field {name!r} has the wrong type ({type(value).__name__})")
        return value

    def path(self, value: Any, where: str) -> tuple[str | int, ...]:
        if not isinstance(value, list) or not all(_is_kind(k, (str, int)) for k in value):
            raise self.fail(where, "'path' must be a list of strings and integers")
        return tuple(value)

    def shape(self, value: Any, where: str) -> tuple[int, ...]:
        if not isinstance(value, list) or len(value) > MAX_RANK:
            raise self.fail(where, f"'shape' must be a list of at most {MAX_RANK} sizes")
        if not all(_is_kind(d, int) and 0 <= d <= MAX_ELEMENTS for d in value):
            raise self.fail(where, f"'shape' {value} holds a size that is not a valid axis size")
        if math.prod(value) > MAX_ELEMENTS:
            raise self.fail(where, f"'shape' {value} has more elements than any array can")
        return tuple(value)

    def box_field(self, value: Any, where: str, depth: int = 0) -> Any:
        if depth > 32:
            raise self.fail(where, "box field nested too deeply")
        if value is None or isinstance(value, (bool, str, int)):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        if isinstance(value, dict) and is_unsaved(value) and len(value) == 1:
            return value
        if isinstance(value, dict) and set(value) == {"tuple"} and isinstance(value["tuple"], list):
            return {"tuple": [self.box_field(v, where, depth + 1) for v in value["tuple"]]}
        raise self.fail(where, "a box field holds a value that is not valid metadata")


def _is_kind(value: Any, kind: Any) -> bool:
    if value is None:
        return kind is None or (isinstance(kind, tuple) and None in kind)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    kinds = tuple(k for k in kinds if k is not None)
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)


def parse_header(
    metadata: Mapping[str, str] | None,
    tensors: Mapping[str, tuple[str, tuple[int, ...]]],
    file: str,
    *,
    header_checked: bool = False,
) -> Header:
    """Parse and check the header against the file's tensors (``name -> (code, shape)``).

    ``header_checked``: the header's checksum was found and verified; a version 2 or 3
    header without one was damaged (version 1 files have none).
    """
    r = _Reader(file)
    if not metadata or metadata.get("format") != FORMAT or FORMAT not in metadata:
        raise CheckpointFormatError(
            f"{file}: no pytreemod header (the safetensors metadata has no "
            f"'format': '{FORMAT}' entry), though it mentions pytreemod or a checksum: a "
            "damaged pytreemod.save file, or metadata another program wrote. Nothing was "
            "loaded; a plain safetensors file must have no such metadata to load unverified."
        )
    try:
        doc = json.loads(metadata[FORMAT])
    except (ValueError, RecursionError) as e:
        raise r.fail("header", f"not valid JSON ({e})") from None
    doc = r.obj(doc, "header")
    version = r.field(doc, "version", int, "header")
    if version not in (1, 2, 3, VERSION):
        raise r.fail("header", f"format version {version} is not supported (this is {VERSION})")
    if version >= 2 and not header_checked:
        raise r.fail("header", "the header's checksum is missing")
    entries = {
        key: _parse_entry(r, key, raw, version)
        for key, raw in r.obj(r.field(doc, "entries", dict, "header"), "entries").items()
    }
    aliases: dict[str, Alias] = {}
    for key, raw in r.obj(r.field(doc, "aliases", dict, "header"), "aliases").items():
        where = f"alias {key!r}"
        raw = r.obj(raw, where)
        of = r.field(raw, "of", str, where)
        if of not in entries or key in entries:
            raise r.fail(where, f"ties to {of!r}, which is not a stored entry")
        aliases[key] = Alias(key, r.path(r.field(raw, "path", list, where), where), of)
    for key, entry in entries.items():
        if key not in tensors:
            raise r.fail(f"entry {key!r}", "the file has no tensor of that name")
        _check_tensor(r, entry, *tensors[key])
    extra = sorted(set(tensors) - set(entries))
    if extra:
        raise r.fail(f"tensor {extra[0]!r}", "the header does not describe it")
    return Header(entries, aliases)


def _parse_entry(r: _Reader, key: str, raw: Any, version: int) -> Entry:
    where = f"entry {key!r}"
    raw = r.obj(raw, where)
    checksum = chunk_checksums = tile_checksums = None
    if version == 2:
        checksum = r.field(raw, "checksum", str, where)
        if not cfile.CHECKSUM.fullmatch(checksum):
            raise r.fail(where, f"'checksum' {checksum!r} is not an {cfile.ALGORITHM} checksum")
    elif version >= 3:
        chunk_checksums = r.field(raw, "chunk_checksums", str, where)
        if not cfile.CHUNK_CHECKSUMS.fullmatch(chunk_checksums):
            raise r.fail(where, f"'chunk_checksums' are not {cfile.ALGORITHM} chunk checksums")
    if version >= 4 and "tile_checksums" in raw:
        tile_checksums = r.field(raw, "tile_checksums", str, where)
        if not cfile.TILE_CHECKSUMS.fullmatch(tile_checksums):
            raise r.fail(where, f"'tile_checksums' are not {cfile.ALGORITHM} tile checksums")
    dtype = r.field(raw, "dtype", str, where)
    encoding = r.field(raw, "encoding", str, where)
    key_impl = r.field(raw, "key_impl", (str, None), where)
    if encoding not in ENCODINGS:
        raise r.fail(where, f"unknown encoding {encoding!r}")
    if encoding == "key":
        if key_impl is None or not dtype.startswith("key<"):
            raise r.fail(where, "a PRNG key entry needs a key dtype and 'key_impl'")
    elif dtype not in DTYPES:
        raise r.fail(where, f"unknown dtype {dtype!r}")
    elif encoding == "native" and dtype not in NATIVE:
        raise r.fail(where, f"dtype {dtype!r} cannot be stored natively")
    boxes = []
    for i, b in enumerate(r.field(raw, "boxes", list, where)):
        bwhere = f"{where}, box {i}"
        b = r.obj(b, bwhere)
        fields = r.obj(r.field(b, "fields", dict, bwhere), bwhere)
        checked = {str(n): r.box_field(v, bwhere) for n, v in fields.items()}
        boxes.append(BoxRecord(r.field(b, "type", str, bwhere), checked))
    return Entry(
        key=key,
        path=r.path(r.field(raw, "path", list, where), where),
        collection=r.field(raw, "collection", str, where),
        variable=r.field(raw, "variable", (str, None), where),
        dtype=dtype,
        shape=r.shape(r.field(raw, "shape", list, where), where),
        encoding=encoding,
        key_impl=key_impl,
        boxes=tuple(boxes),
        checksum=checksum,
        chunk_checksums=chunk_checksums,
        tile_checksums=tile_checksums,
    )


def _check_tensor(r: _Reader, e: Entry, code: str, shape: tuple[int, ...]) -> None:
    where = f"entry {e.key!r}"
    stored = NATIVE_CODES.get(code)
    if stored is None:
        raise r.fail(where, f"tensor dtype {code!r} is not one pytreemod writes")
    if e.encoding == "native":
        ok = stored == e.dtype and tuple(shape) == e.shape
    elif e.encoding == "bytes":
        nbytes = math.prod(e.shape) * DTYPES[e.dtype].itemsize
        ok = stored == "uint8" and tuple(shape) == (nbytes,)
    else:
        ok = stored == "uint32" and tuple(shape[: len(e.shape)]) == e.shape
        ok = ok and len(shape) == len(e.shape) + 1
    if not ok:
        raise r.fail(
            where,
            f"the tensor ({code}{list(shape)}) does not hold a {e.encoding}-encoded "
            f"{e.dtype}{list(e.shape)}",
        )
    for sums in (e.chunk_checksums, e.tile_checksums):
        try:
            if sums is not None:
                cfile.parse_sums(sums, shape, DTYPES[stored].itemsize)
        except ValueError as problem:
            raise r.fail(where, str(problem)) from None
