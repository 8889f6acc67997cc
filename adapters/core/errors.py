"""``adapters.core.errors``: every exception class of ``adapters`` (``flax.errors``' names).

The same class objects as ``adapters.errors``.
"""

from ._errors import (
    ApplyScopeInvalidVariablesStructureError as ApplyScopeInvalidVariablesStructureError,
)
from ._errors import ApplyScopeInvalidVariablesTypeError as ApplyScopeInvalidVariablesTypeError
from ._errors import BranchVariableMismatchError as BranchVariableMismatchError
from ._errors import CarryVariableInitError as CarryVariableInitError
from ._errors import CoreError as CoreError
from ._errors import FlaxError as FlaxError
from ._errors import ImmutableVariableError as ImmutableVariableError
from ._errors import InvalidFilterError as InvalidFilterError
from ._errors import InvalidRngError as InvalidRngError
from ._errors import InvalidScopeError as InvalidScopeError
from ._errors import JaxTransformError as JaxTransformError
from ._errors import LazyInitError as LazyInitError
from ._errors import LiftError as LiftError
from ._errors import ModifyScopeVariableError as ModifyScopeVariableError
from ._errors import PartitioningUnspecifiedError as PartitioningUnspecifiedError
from ._errors import ScopeCollectionNotFound as ScopeCollectionNotFound
from ._errors import ScopeNameInUseError as ScopeNameInUseError
from ._errors import ScopeParamNotFoundError as ScopeParamNotFoundError
from ._errors import ScopeParamShapeError as ScopeParamShapeError
from ._errors import ScopeVariableNotFoundError as ScopeVariableNotFoundError
from ._errors import TraceContextError as TraceContextError
from ._errors import UnliftedCollectionError as UnliftedCollectionError
from ._errors import UnliftedRngError as UnliftedRngError
from ._errors_linen import AlreadyExistsError as AlreadyExistsError
from ._errors_linen import ApplyModuleInvalidMethodError as ApplyModuleInvalidMethodError
from ._errors_linen import AssignSubModuleError as AssignSubModuleError
from ._errors_linen import CallCompactUnboundModuleError as CallCompactUnboundModuleError
from ._errors_linen import CallSetupUnboundModuleError as CallSetupUnboundModuleError
from ._errors_linen import CallShareScopeOnUnboundModuleError as CallShareScopeOnUnboundModuleError
from ._errors_linen import CallUnbindOnUnboundModuleError as CallUnbindOnUnboundModuleError
from ._errors_linen import CursorFindError as CursorFindError
from ._errors_linen import DescriptorAttributeError as DescriptorAttributeError
from ._errors_linen import IncorrectPostInitOverrideError as IncorrectPostInitOverrideError
from ._errors_linen import InvalidCheckpointError as InvalidCheckpointError
from ._errors_linen import InvalidInstanceModuleError as InvalidInstanceModuleError
from ._errors_linen import MPACheckpointingRequiredError as MPACheckpointingRequiredError
from ._errors_linen import MPARestoreDataCorruptedError as MPARestoreDataCorruptedError
from ._errors_linen import MPARestoreTargetRequiredError as MPARestoreTargetRequiredError
from ._errors_linen import MultipleMethodsCompactError as MultipleMethodsCompactError
from ._errors_linen import NameInUseError as NameInUseError
from ._errors_linen import ReservedModuleAttributeError as ReservedModuleAttributeError
from ._errors_linen import SetAttributeFrozenModuleError as SetAttributeFrozenModuleError
from ._errors_linen import SetAttributeInModuleSetupError as SetAttributeInModuleSetupError
from ._errors_linen import TransformedMethodReturnValueError as TransformedMethodReturnValueError
from ._errors_linen import TransformTargetError as TransformTargetError
from ._errors_linen import TraverseTreeError as TraverseTreeError

__all__ = [
    "AlreadyExistsError",
    "ApplyModuleInvalidMethodError",
    "ApplyScopeInvalidVariablesStructureError",
    "ApplyScopeInvalidVariablesTypeError",
    "AssignSubModuleError",
    "BranchVariableMismatchError",
    "CallCompactUnboundModuleError",
    "CallSetupUnboundModuleError",
    "CallShareScopeOnUnboundModuleError",
    "CallUnbindOnUnboundModuleError",
    "CarryVariableInitError",
    "CoreError",
    "CursorFindError",
    "DescriptorAttributeError",
    "FlaxError",
    "ImmutableVariableError",
    "IncorrectPostInitOverrideError",
    "InvalidCheckpointError",
    "InvalidFilterError",
    "InvalidInstanceModuleError",
    "InvalidRngError",
    "InvalidScopeError",
    "JaxTransformError",
    "LazyInitError",
    "LiftError",
    "MPACheckpointingRequiredError",
    "MPARestoreDataCorruptedError",
    "MPARestoreTargetRequiredError",
    "ModifyScopeVariableError",
    "MultipleMethodsCompactError",
    "NameInUseError",
    "PartitioningUnspecifiedError",
    "ReservedModuleAttributeError",
    "ScopeCollectionNotFound",
    "ScopeNameInUseError",
    "ScopeParamNotFoundError",
    "ScopeParamShapeError",
    "ScopeVariableNotFoundError",
    "SetAttributeFrozenModuleError",
    "SetAttributeInModuleSetupError",
    "TraceContextError",
    "TransformTargetError",
    "TransformedMethodReturnValueError",
    "TraverseTreeError",
    "UnliftedCollectionError",
    "UnliftedRngError",
]
