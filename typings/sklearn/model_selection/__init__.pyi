from typing import Any, TypeVar

_A = TypeVar("_A")

# Splits each array the same way: (a_train, a_test, b_train, b_test, ...), each of the
# type it was given (numpy arrays stay numpy arrays).
def train_test_split(
    *arrays: _A,
    test_size: float | int | None = None,
    train_size: float | int | None = None,
    random_state: int | Any | None = None,
    shuffle: bool = True,
    stratify: Any | None = None,
) -> list[_A]: ...
