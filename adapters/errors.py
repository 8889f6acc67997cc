"""``adapters.errors``: the exception classes, under ``flax.errors``' names and texts.

The classes are defined in ``adapters.core`` (the lowest layer that raises them) and are
the same objects as ``adapters.core.errors``'.
"""

from .core.errors import AlreadyExistsError as AlreadyExistsError
from .core.errors import ApplyModuleInvalidMethodError as ApplyModuleInvalidMethodError
from .core.errors import (
    ApplyScopeInvalidVariablesStructureError as ApplyScopeInvalidVariablesStructureError,
)
from .core.errors import ApplyScopeInvalidVariablesTypeError as ApplyScopeInvalidVariablesTypeError
from .core.errors import AssignSubModuleError as AssignSubModuleError
from .core.errors import BranchVariableMismatchError as BranchVariableMismatchError
from .core.errors import CallCompactUnboundModuleError as CallCompactUnboundModuleError
from .core.errors import CallSetupUnboundModuleError as CallSetupUnboundModuleError
from .core.errors import CallShareScopeOnUnboundModuleError as CallShareScopeOnUnboundModuleError
from .core.errors import CallUnbindOnUnboundModuleError as CallUnbindOnUnboundModuleError
from .core.errors import CarryVariableInitError as CarryVariableInitError
from .core.errors import CoreError as CoreError
from .core.errors import CursorFindError as CursorFindError
from .core.errors import DescriptorAttributeError as DescriptorAttributeError
from .core.errors import FlaxError as FlaxError
from .core.errors import ImmutableVariableError as ImmutableVariableError
from .core.errors import IncorrectPostInitOverrideError as IncorrectPostInitOverrideError
from .core.errors import InvalidCheckpointError as InvalidCheckpointError
from .core.errors import InvalidFilterError as InvalidFilterError
from .core.errors import InvalidInstanceModuleError as InvalidInstanceModuleError
from .core.errors import InvalidRngError as InvalidRngError
from .core.errors import InvalidScopeError as InvalidScopeError
from .core.errors import JaxTransformError as JaxTransformError
from .core.errors import LazyInitError as LazyInitError
from .core.errors import LiftError as LiftError
from .core.errors import ModifyScopeVariableError as ModifyScopeVariableError
from .core.errors import MPACheckpointingRequiredError as MPACheckpointingRequiredError
from .core.errors import MPARestoreDataCorruptedError as MPARestoreDataCorruptedError
from .core.errors import MPARestoreTargetRequiredError as MPARestoreTargetRequiredError
from .core.errors import MultipleMethodsCompactError as MultipleMethodsCompactError
from .core.errors import NameInUseError as NameInUseError
from .core.errors import PartitioningUnspecifiedError as PartitioningUnspecifiedError
from .core.errors import ReservedModuleAttributeError as ReservedModuleAttributeError
from .core.errors import ScopeCollectionNotFound as ScopeCollectionNotFound
from .core.errors import ScopeNameInUseError as ScopeNameInUseError
from .core.errors import ScopeParamNotFoundError as ScopeParamNotFoundError
from .core.errors import ScopeParamShapeError as ScopeParamShapeError
from .core.errors import ScopeVariableNotFoundError as ScopeVariableNotFoundError
from .core.errors import SetAttributeFrozenModuleError as SetAttributeFrozenModuleError
from .core.errors import SetAttributeInModuleSetupError as SetAttributeInModuleSetupError
from .core.errors import TraceContextError as TraceContextError
from .core.errors import TransformedMethodReturnValueError as TransformedMethodReturnValueError
from .core.errors import TransformTargetError as TransformTargetError
from .core.errors import TraverseTreeError as TraverseTreeError
from .core.errors import UnliftedCollectionError as UnliftedCollectionError
from .core.errors import UnliftedRngError as UnliftedRngError

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
