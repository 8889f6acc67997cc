"""``adapters.core.errors``: the exception classes (``flax.errors``' names for the core)."""

from ._errors import (
    ApplyScopeInvalidVariablesStructureError as ApplyScopeInvalidVariablesStructureError,
)
from ._errors import ApplyScopeInvalidVariablesTypeError as ApplyScopeInvalidVariablesTypeError
from ._errors import BranchVariableMismatchError as BranchVariableMismatchError
from ._errors import CarryVariableInitError as CarryVariableInitError
from ._errors import CoreError as CoreError
from ._errors import InvalidFilterError as InvalidFilterError
from ._errors import InvalidRngError as InvalidRngError
from ._errors import InvalidScopeError as InvalidScopeError
from ._errors import LazyInitError as LazyInitError
from ._errors import LiftError as LiftError
from ._errors import ModifyScopeVariableError as ModifyScopeVariableError
from ._errors import ScopeCollectionNotFound as ScopeCollectionNotFound
from ._errors import ScopeNameInUseError as ScopeNameInUseError
from ._errors import ScopeParamNotFoundError as ScopeParamNotFoundError
from ._errors import ScopeParamShapeError as ScopeParamShapeError
from ._errors import ScopeVariableNotFoundError as ScopeVariableNotFoundError
from ._errors import UnliftedCollectionError as UnliftedCollectionError
from ._errors import UnliftedRngError as UnliftedRngError
