"""``Module``: a frozen dataclass that is a PyTree; one concept per file (README.md)."""

from ._base import Module as Module
from ._base import fields as fields
from ._base import replace as replace
from ._bound import BoundMethod as BoundMethod
from ._descriptors import CallHook as CallHook
from ._descriptors import call_hook as call_hook
from ._fields import field as field
from ._metaclass import _ModuleMeta as _ModuleMeta
