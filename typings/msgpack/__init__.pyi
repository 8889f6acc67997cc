# Stub for the part of msgpack (no type information shipped) this project uses.
# Unpacked data is whatever the bytes encode, hence ``Any``.
from collections.abc import Callable
from typing import Any, NamedTuple

class ExtType(NamedTuple):
    code: int
    data: bytes

class UnpackException(Exception): ...
class ExtraData(ValueError): ...
class FormatError(ValueError, UnpackException): ...
class StackError(ValueError, UnpackException): ...

def packb(
    o: Any,
    *,
    default: Callable[[Any], Any] | None = None,
    use_single_float: bool = False,
    use_bin_type: bool = True,
    datetime: bool = False,
    unicode_errors: str | None = None,
    strict_types: bool = False,
) -> bytes: ...
def unpackb(
    packed: bytes,
    *,
    raw: bool = False,
    use_list: bool = True,
    timestamp: int = 0,
    strict_map_key: bool = True,
    object_hook: Callable[[dict[Any, Any]], Any] | None = None,
    object_pairs_hook: Callable[[list[tuple[Any, Any]]], Any] | None = None,
    list_hook: Callable[[list[Any]], Any] | None = None,
    unicode_errors: str | None = None,
    ext_hook: Callable[[int, bytes], Any] = ...,
    max_buffer_size: int = ...,
    max_str_len: int = -1,
    max_bin_len: int = -1,
    max_array_len: int = -1,
    max_map_len: int = -1,
    max_ext_len: int = -1,
) -> Any: ...

dumps = packb
loads = unpackb
