"""``flax.serialization`` over pytreemod: state dicts, and Flax's msgpack wire format.

``to_state_dict`` turns a target (dicts, lists, tuples, named tuples, ``FrozenDict``,
``jax.tree_util.Partial``, struct dataclasses, pytreemod modules, Variables and
axis-metadata boxes, or any type registered with ``register_serialization_state``) into
nested dicts with string keys; ``from_state_dict`` restores a copy of a target from one.
``to_bytes``/``from_bytes`` and ``msgpack_serialize``/``msgpack_restore`` write and read
the msgpack encoding Flax uses (arrays as ext type 1 holding ``(shape, dtype name,
bytes)``, Python complex numbers as ext type 2, NumPy scalars as ext type 3, arrays over
``MAX_CHUNK_SIZE`` bytes split into chunks), so bytes written by ``flax.serialization``
load here and the reverse.

pytreemod's types map as Flax's do: a module or box is its non-static fields
(``Partitioned`` is ``{'value': ...}``, as Flax's is), a Variable is its value. Restoring
a module that ties one Variable to several places gives one restored Variable in all of
them. Reading bytes never runs code: only plain data, arrays of numeric dtypes and
complex numbers are decoded.
"""

import dataclasses
import enum
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pytreemod as pm

from .core import FrozenDict
from .core.errors import FlaxError

__all__ = [
    "MAX_CHUNK_SIZE",
    "MsgpackDecodeError",
    "current_path",
    "from_bytes",
    "from_state_dict",
    "is_serializable",
    "msgpack_restore",
    "msgpack_serialize",
    "register_serialization_state",
    "to_bytes",
    "to_state_dict",
]

_STATE_DICT_REGISTRY: dict[Any, tuple[Callable[..., Any], Callable[..., Any]]] = {}


class MsgpackDecodeError(FlaxError, ValueError):
    """Bytes given to ``msgpack_restore``/``from_bytes`` are not a msgpack state dict:
    truncated, corrupted, or another format. A ``ValueError``, as the errors of the
    ``msgpack`` package that Flax lets through here are; nothing of the bytes is returned.
    """


class _Context(threading.local):
    def __init__(self) -> None:
        self.path: list[str] = []
        self.restored: dict[int, Any] | None = None  # Variable id -> restored Variable


_context = _Context()


@contextmanager
def _record_path(name: str) -> Generator[None, None, None]:
    _context.path.append(name)
    try:
        yield
    finally:
        _context.path.pop()


def current_path() -> str:
    """The state-dict path being restored, ``'/'``-joined (for error messages)."""
    return "/".join(_context.path)


class _NamedTuple:
    """Registry key standing for every namedtuple class."""


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _handlers(target: Any) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    ty = _NamedTuple if _is_namedtuple(target) else type(target)
    found = _STATE_DICT_REGISTRY.get(ty)
    if found is not None:
        return found
    if isinstance(target, pm.Variable):
        return _variable_state_dict, _restore_variable
    if isinstance(target, pm.Module) or (
        dataclasses.is_dataclass(target) and getattr(type(target), "_flax_dataclass", False)
    ):
        return _dataclass_state_dict, _restore_dataclass
    return None


def from_state_dict(target: Any, state: Any, name: str = ".") -> Any:
    """Return a copy of ``target`` with its state restored from ``state``.

    Only ``target``'s structure is used; unregistered leaves (arrays, numbers) are
    replaced by the values in ``state``. A mismatch raises ``ValueError`` naming the
    state-dict path (``./params/Dense_0``).
    """
    handlers = _handlers(target)
    if handlers is None:
        return state
    outermost = _context.restored is None
    if outermost:
        _context.restored = {}
    try:
        with _record_path(name):
            return handlers[1](target, state)
    finally:
        if outermost:
            _context.restored = None


def to_state_dict(target: Any) -> Any:
    """The state of ``target`` as nested dicts with string keys (leaves unchanged)."""
    handlers = _handlers(target)
    if handlers is None:
        return target
    state = handlers[0](target)
    if isinstance(state, dict):
        for key in state:
            assert isinstance(key, str), "A state dict must only have string keys."
    return state


def is_serializable(target: Any) -> bool:
    """Whether ``target`` (an instance or a type) has registered state-dict handlers."""
    ty = target if isinstance(target, type) else type(target)
    return ty in _STATE_DICT_REGISTRY


def register_serialization_state(
    ty: Any,
    ty_to_state_dict: Callable[[Any], Any],
    ty_from_state_dict: Callable[[Any, Any], Any],
    override: bool = False,
) -> None:
    """Register how instances of ``ty`` become a state dict and are restored from one.

    ``ty_to_state_dict(x)`` returns the state; ``ty_from_state_dict(x, state)`` returns a
    restored copy of ``x``. Registering a type twice is a ``ValueError`` unless
    ``override=True``.
    """
    if ty in _STATE_DICT_REGISTRY and not override:
        raise ValueError(f'a serialization handler for "{ty.__name__}" is already registered')
    _STATE_DICT_REGISTRY[ty] = (ty_to_state_dict, ty_from_state_dict)


# ------------------------------------------------------------------- built-in handlers


def _list_state_dict(xs: Any) -> dict[str, Any]:
    return {str(i): to_state_dict(x) for i, x in enumerate(xs)}


def _restore_list(xs: Any, state: dict[str, Any]) -> list[Any]:
    if len(state) != len(xs):
        raise ValueError(
            "The size of the list and the state dict do not match,"
            f" got {len(xs)} and {len(state)} at path {current_path()}"
        )
    return [from_state_dict(x, state[str(i)], name=str(i)) for i, x in enumerate(xs)]


def _dict_state_dict(xs: Any) -> dict[str, Any]:
    keys = {str(k) for k in xs}
    if len(keys) != len(xs):
        raise ValueError(
            f"Dict keys do not have a unique string representation: {keys} vs given: {xs}"
        )
    return {str(k): to_state_dict(v) for k, v in xs.items()}


def _check_keys(xs: Any, state: Any) -> None:
    missing = set(map(str, xs.keys())).difference(map(str, state.keys()))
    if missing:
        raise ValueError(
            "The target dict keys and state dict keys do not match, target dict contains "
            f"keys {missing} which are not present in state dict at path {current_path()}"
        )


def _restore_dict(xs: Any, state: dict[str, Any]) -> dict[Any, Any]:
    _check_keys(xs, state)
    return {k: from_state_dict(v, state[str(k)], name=str(k)) for k, v in xs.items()}


def _restore_frozen_dict(xs: Any, state: dict[str, Any]) -> FrozenDict:
    _check_keys(xs, state)
    return FrozenDict({k: from_state_dict(v, state[str(k)], name=k) for k, v in xs.items()})


def _namedtuple_state_dict(nt: Any) -> dict[str, Any]:
    return {name: to_state_dict(getattr(nt, name)) for name in nt._fields}


def _restore_namedtuple(xs: Any, state: dict[str, Any]) -> Any:
    if set(state) == {"name", "fields", "values"}:  # the encoding of old Flax versions
        state = {
            state["fields"][str(i)]: state["values"][str(i)] for i in range(len(state["fields"]))
        }
    if set(state) != set(xs._fields):
        raise ValueError(
            "The field names of the state dict and the named tuple do not match, got "
            f"{set(state)} and {set(xs._fields)} at path {current_path()}"
        )
    return type(xs)(**{k: from_state_dict(getattr(xs, k), v, name=k) for k, v in state.items()})


def _data_fields(x: Any) -> list[str]:
    """The fields that carry state: a Module's non-static ones, a struct dataclass's
    ``pytree_node`` ones."""
    if isinstance(x, pm.Module):
        return [f.name for f in pm.fields(x) if not f.metadata.get("static", False)]
    return [f.name for f in dataclasses.fields(x) if f.metadata.get("pytree_node", True)]


def _dataclass_state_dict(x: Any) -> dict[str, Any]:
    return {name: to_state_dict(getattr(x, name)) for name in _data_fields(x)}


def _restore_dataclass(x: Any, state: dict[str, Any]) -> Any:
    state = dict(state)
    updates: dict[str, Any] = {}
    for name in _data_fields(x):
        if name not in state:
            raise ValueError(
                f"Missing field {name} in state dict while restoring an instance of "
                f"{type(x).__name__}, at path {current_path()}"
            )
        updates[name] = from_state_dict(getattr(x, name), state.pop(name), name=name)
    if state:
        names = ",".join(state.keys())
        raise ValueError(
            f'Unknown field(s) "{names}" in state dict while restoring an instance of '
            f"{type(x).__name__} at path {current_path()}"
        )
    if isinstance(x, pm.Module):
        return x.replace(**updates)
    replace = getattr(x, "replace", None)
    return replace(**updates) if callable(replace) else dataclasses.replace(x, **updates)


def _variable_state_dict(var: pm.Variable) -> Any:
    return to_state_dict(var.value)


def _restore_variable(var: pm.Variable, state: Any) -> pm.Variable:
    restored = _context.restored if _context.restored is not None else {}
    if id(var) not in restored:  # a tied Variable is restored once, from its first place
        handlers = _handlers(var.value)  # transparent: no path component of its own
        value = handlers[1](var.value, state) if handlers is not None else state
        restored[id(var)] = var.replace(value)
    return restored[id(var)]


register_serialization_state(dict, _dict_state_dict, _restore_dict)
register_serialization_state(list, _list_state_dict, _restore_list)
register_serialization_state(
    tuple, _list_state_dict, lambda xs, state: tuple(_restore_list(list(xs), state))
)
register_serialization_state(_NamedTuple, _namedtuple_state_dict, _restore_namedtuple)
register_serialization_state(FrozenDict, _dict_state_dict, _restore_frozen_dict)
register_serialization_state(
    jax.tree_util.Partial,
    lambda x: {"args": to_state_dict(x.args), "keywords": to_state_dict(x.keywords)},
    lambda x, state: jax.tree_util.Partial(
        x.func,
        *from_state_dict(x.args, state["args"]),
        **from_state_dict(x.keywords, state["keywords"]),
    ),
)


# --------------------------------------------------------------------- msgpack format


def _msgpack() -> Any:
    """The ``msgpack`` module, imported on first use: state dicts (what Linen's lifted
    transforms use) need no wire format, and ``import adapters.linen`` should not pay
    for one."""
    import msgpack

    return msgpack


MAX_CHUNK_SIZE = 2**30
"""Arrays larger than this many bytes are written as chunks (msgpack objects are limited
to 2**31 - 1 bytes). Read at call time, so it can be changed."""

_CHUNKED = "__msgpack_chunked_array__"


class _MsgpackExtType(enum.IntEnum):
    """The msgpack extension type codes Flax uses."""

    ndarray = 1
    native_complex = 2
    npscalar = 3


def _ndarray_to_bytes(arr: Any) -> bytes:
    if isinstance(arr, jax.Array):
        arr = np.asarray(arr)
    if arr.dtype.hasobject or arr.dtype.isalignedstruct:
        raise ValueError(
            "Object and structured dtypes not supported for serialization of ndarrays."
        )
    return _pack((arr.shape, arr.dtype.name, arr.tobytes("C")), use_bin_type=True)


def _dtype_from_name(name: Any) -> np.dtype:
    text = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError, SyntaxError):
        try:
            dtype = np.dtype(jnp.dtype(text))  # bfloat16, float8_*, int4...: ml_dtypes
        except (TypeError, ValueError, SyntaxError):
            raise MsgpackDecodeError(
                f"msgpack data holds an array of unknown dtype {text!r}"
            ) from None
    if dtype.hasobject or dtype.fields is not None:
        raise MsgpackDecodeError(f"msgpack data holds an array of unsupported dtype {text!r}")
    return dtype


def _pack(obj: Any, **options: Any) -> bytes:
    out = _msgpack().packb(obj, **options)
    assert out is not None
    return out


def _ndarray_from_bytes(data: bytes) -> np.ndarray:
    try:
        shape, name, buffer = _msgpack().unpackb(data, raw=True)
        return np.frombuffer(buffer, dtype=_dtype_from_name(name)).reshape(shape, order="C")
    except (TypeError, ValueError) as e:  # crafted or damaged bytes: always a ValueError
        raise MsgpackDecodeError(f"msgpack data holds a malformed array ({e})") from None


def _msgpack_ext_pack(x: Any) -> Any:
    """msgpack ``default`` hook: arrays, NumPy scalars and complex numbers as ext types."""
    if isinstance(x, (np.ndarray, jax.Array)):
        return _msgpack().ExtType(_MsgpackExtType.ndarray, _ndarray_to_bytes(x))
    if isinstance(x, np.generic):
        return _msgpack().ExtType(_MsgpackExtType.npscalar, _ndarray_to_bytes(np.asarray(x)))
    if isinstance(x, complex):
        return _msgpack().ExtType(_MsgpackExtType.native_complex, _pack((x.real, x.imag)))
    return x


def _msgpack_ext_unpack(code: int, data: bytes) -> Any:
    """msgpack ``ext_hook``: the inverse of ``_msgpack_ext_pack``."""
    if code == _MsgpackExtType.ndarray:
        return _ndarray_from_bytes(data)
    if code == _MsgpackExtType.native_complex:
        try:
            real, imag = _msgpack().unpackb(data)
            return complex(real, imag)
        except (TypeError, ValueError) as e:
            raise MsgpackDecodeError(
                f"msgpack data holds a malformed complex number ({e})"
            ) from None
    if code == _MsgpackExtType.npscalar:
        return _ndarray_from_bytes(data)[()]
    # Flax hands unknown codes back as msgpack.ExtType objects; nothing either library
    # writes has one, so it is a changed byte, and a leaf of the wrong type must not load.
    raise MsgpackDecodeError(
        f"msgpack data holds an extension of unknown type code {code} (Flax and pytreemod "
        f"write only codes {', '.join(str(int(c)) for c in _MsgpackExtType)}): the bytes "
        "are corrupted or were not written by msgpack_serialize"
    )


def _np_convert_in_place(d: Any) -> Any:
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, jax.Array):
                d[k] = np.asarray(v)
            elif isinstance(v, dict):
                _np_convert_in_place(v)
    elif isinstance(d, jax.Array):
        return np.asarray(d)
    return d


def _as_dict(xs: Any) -> dict[str, Any]:
    return {str(i): x for i, x in enumerate(xs)}


def _as_tuple(d: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(d[str(i)] for i in range(len(d)))


def _chunk(arr: np.ndarray) -> dict[str, Any]:
    size = max(1, int(MAX_CHUNK_SIZE / arr.dtype.itemsize))
    flat = arr.reshape(-1)
    chunks = [flat[i : i + size] for i in range(0, flat.size, size)]
    return {_CHUNKED: True, "shape": _as_dict(arr.shape), "chunks": _as_dict(chunks)}


def _unchunk(data: dict[str, Any]) -> np.ndarray:
    shape = _as_tuple(data["shape"])
    return np.concatenate(_as_tuple(data["chunks"])).reshape(shape)


def _too_big(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.size * x.dtype.itemsize > MAX_CHUNK_SIZE


def _chunk_array_leaves_in_place(d: Any) -> Any:
    """Replace arrays over ``MAX_CHUNK_SIZE`` bytes (in nested dicts) by chunk dicts."""
    if isinstance(d, dict):
        for k, v in d.items():
            if _too_big(v):
                d[k] = _chunk(v)
            elif isinstance(v, dict):
                _chunk_array_leaves_in_place(v)
    elif _too_big(d):
        return _chunk(d)
    return d


def _unchunk_array_leaves_in_place(d: Any) -> Any:
    if isinstance(d, dict):
        if _CHUNKED in d:
            return _unchunk(d)
        for k, v in d.items():
            if isinstance(v, dict):
                d[k] = _unchunk_array_leaves_in_place(v)
    return d


def msgpack_serialize(pytree: Any, in_place: bool = False) -> bytes:
    """Encode a tree of dicts, lists and array/number leaves as msgpack bytes.

    Arrays over ``MAX_CHUNK_SIZE`` bytes are split into chunks. With ``in_place=False``
    (the default) the dicts of ``pytree`` are copied first; for other objects use
    ``to_bytes``.
    """
    if not in_place:
        pytree = jax.tree_util.tree_map(lambda x: x, pytree)
    pytree = _np_convert_in_place(pytree)
    pytree = _chunk_array_leaves_in_place(pytree)
    return _pack(pytree, default=_msgpack_ext_pack, strict_types=True)


def msgpack_restore(encoded_pytree: bytes) -> Any:
    """Decode bytes written by ``msgpack_serialize`` (or Flax's) into dicts and arrays.

    Damaged or crafted bytes raise ``MsgpackDecodeError`` (a ``ValueError``) saying what
    is wrong; only plain data, arrays of numeric dtypes and complex numbers are ever built.
    Unlike Flax, which returns an extension type it does not know as a ``msgpack.ExtType``
    leaf, an unknown extension code is an error: neither library writes one, so it can only
    come from a changed byte.
    """
    try:
        state = _msgpack().unpackb(
            encoded_pytree, ext_hook=_msgpack_ext_unpack, raw=False, strict_map_key=False
        )
        return _unchunk_array_leaves_in_place(state)
    except MsgpackDecodeError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError) as e:
        # damaged or crafted bytes; msgpack's own errors (ExtraData, FormatError...) included
        raise MsgpackDecodeError(_malformed(e)) from None


def _malformed(e: Exception) -> str:
    name = type(e).__name__
    if isinstance(e, _msgpack().exceptions.ExtraData):
        return f"msgpack data is malformed: bytes follow the end of the data ({name})"
    if "incomplete" in str(e).lower() or "out of data" in str(e).lower():
        return f"msgpack data ends early: the bytes are truncated ({name}: {e})"
    return f"msgpack data is malformed: truncated, corrupted or not msgpack ({name}: {e})"


def from_bytes(target: Any, encoded_bytes: bytes) -> Any:
    """Restore a copy of ``target`` from msgpack bytes of its state dict."""
    return from_state_dict(target, msgpack_restore(encoded_bytes))


def to_bytes(target: Any) -> bytes:
    """The msgpack bytes of ``target``'s state dict."""
    return msgpack_serialize(to_state_dict(target), in_place=True)
