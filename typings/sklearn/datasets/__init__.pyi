# Stub for the part of scikit-learn (no type information shipped) the examples use.
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import NDArray

class Bunch(dict[str, Any]):
    def __getattr__(self, key: str) -> Any: ...

@overload
def load_digits(
    *, n_class: int = 10, return_X_y: Literal[False] = False, as_frame: bool = False
) -> Bunch: ...
@overload
def load_digits(
    *, n_class: int = 10, return_X_y: Literal[True], as_frame: Literal[False] = False
) -> tuple[NDArray[np.float64], NDArray[np.int64]]: ...
