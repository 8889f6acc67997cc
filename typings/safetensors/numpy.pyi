import os

import numpy as np
from numpy.typing import NDArray

def save(
    tensor_dict: dict[str, NDArray[np.generic]], metadata: dict[str, str] | None = None
) -> bytes: ...
def save_file(
    tensor_dict: dict[str, NDArray[np.generic]],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
) -> None: ...
def load(data: bytes) -> dict[str, NDArray[np.generic]]: ...
def load_file(
    filename: str | os.PathLike[str], *, backend: str = "mmap"
) -> dict[str, NDArray[np.generic]]: ...
