"""``flax.nnx.bridge``: NNX and Linen modules inside each other.

``ToNNX``/``lazy_init`` run a Linen module as an NNX Module; ``ToLinen``/``to_linen`` run
an NNX module class as a Linen module; ``Module``/``compact`` write NNX modules with
Linen's conventions (``setup``, ``@compact``, ``init``/``apply``); ``variables`` converts
variables between the two worlds (``NNXMeta`` boxes NNX metadata for Linen).
"""

from ..nn import initializers as initializers
from .interop import linen_in_bridge_mdl as linen_in_bridge_mdl
from .interop import nnx_in_bridge_mdl as nnx_in_bridge_mdl
from .module import AttrPriority as AttrPriority
from .module import Module as Module
from .module import Scope as Scope
from .module import compact as compact
from .module import current_context as current_context
from .module import current_module as current_module
from .variables import NNXMeta as NNXMeta
from .variables import with_partitioning as with_partitioning
from .wrappers import Functional as Functional
from .wrappers import ToLinen as ToLinen
from .wrappers import ToNNX as ToNNX
from .wrappers import functional as functional
from .wrappers import lazy_init as lazy_init
from .wrappers import to_linen as to_linen
