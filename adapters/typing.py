"""``adapters.typing``: the type aliases of ``flax.typing`` (plain aliases for annotations)."""

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import jax

from .core import FrozenDict
from .core.lift import In as In
from .core.lift import Out as Out

Array = jax.Array | Any
PRNGKey = jax.Array
RNGSequences = dict[str, PRNGKey]
Dtype = jax.typing.DTypeLike | Any
Shape = Sequence[int]
Key = Hashable
Path = str
PathParts = tuple[Key, ...]
Leaf = Any
PrecisionLike = (
    None | str | jax.lax.Precision | tuple[str, str] | tuple[jax.lax.Precision, jax.lax.Precision]
)
DotGeneralT = Callable[..., Array]
ConvGeneralDilatedT = Callable[..., Array]
EinsumT = Callable[..., Array]
PaddingLike = str | int | Sequence[int | tuple[int, int]]
LaxPadding = str | Sequence[tuple[int, int]]
Initializer = jax.nn.initializers.Initializer | Callable[..., Any]
Collection = Mapping[str, Any]
MutableCollection = dict[str, Any]
VariableDict = Mapping[str, Collection]
FrozenVariableDict = FrozenDict[str, Collection]
MutableVariableDict = dict[str, MutableCollection]
PRNGFoldable = int | str
Axis = int | None
InOutAxis = Axis | In[Axis] | Out[Axis]
ScanAxis = int
InOutScanAxis = ScanAxis | In[ScanAxis] | Out[ScanAxis]
Axes = int | Sequence[int]
LogicalNames = tuple[str | None, ...]
AxisName = str | tuple[str, ...] | None
LogicalRules = Sequence[tuple[str, AxisName]]
ArrayPytree = Any
LogicalPartitionSpec = Any
LogicalPartitionSpecPytree = Any
PartitionSpecPytree = Any
Sharding = tuple[AxisName, ...]

_Tup = TypeVar("_Tup", bound=tuple[Any, ...])


class Missing:
    """Type of ``MISSING``, the "no value given" marker."""


MISSING = Missing()


class PromoteDtypeFn(Protocol):
    """A function promoting a tuple of arrays to a common dtype (``promote_dtype``'s type)."""

    def __call__(self, args: _Tup, /, *, dtype: Any = None, inexact: bool = True) -> _Tup: ...
