# Stub for safetensors: its own __init__.pyi leaves safe_open unannotated, so every value
# read from a file was Unknown. Signatures follow safetensors 0.5-0.8.
import os
from types import TracebackType
from typing import Any, Self

__version__: str

class SafetensorError(Exception): ...

class PySafeSlice:
    def get_shape(self) -> list[int]: ...
    def get_dtype(self) -> str: ...
    def __getitem__(self, index: Any) -> Any: ...

class safe_open:
    # Tensors come back in the type of ``framework`` ("np": numpy arrays, "pt": torch
    # tensors...), hence ``Any``.
    def __init__(
        self,
        filename: str | os.PathLike[str],
        framework: str,
        device: str | int = "cpu",
        *,
        backend: str = "mmap",
    ) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    def keys(self) -> list[str]: ...
    def offset_keys(self) -> list[str]: ...
    # A dict[str, str], or None for a file saved without metadata; Any so that callers
    # that know their files have it need no check.
    def metadata(self) -> Any: ...
    def get_tensor(self, name: str) -> Any: ...
    def get_slice(self, name: str) -> PySafeSlice: ...

def serialize(
    tensor_dict: dict[str, dict[str, Any]], metadata: dict[str, str] | None = None
) -> bytes: ...
def serialize_file(
    tensor_dict: dict[str, dict[str, Any]],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
) -> None: ...
def deserialize(bytes: bytes) -> list[tuple[str, dict[str, Any]]]: ...
