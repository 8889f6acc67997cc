"""adapters.linen: Flax's Linen API (``flax.linen``) rebuilt over ``adapters.core``.

Linen code runs by importing ``adapters.linen`` (usually ``as nn``) instead of
``flax.linen``. The namespace mirrors ``flax/linen/__init__.py``.
"""

# ----------------------------------------------------------------------------- core names
from ..core import DenyList as DenyList
from ..core import FrozenDict as FrozenDict
from ..core import broadcast as broadcast
from ..core import meta as meta
from ..core.meta import PARTITION_NAME as PARTITION_NAME
from ..core.meta import Partitioned as Partitioned
from ..core.meta import get_partition_spec as get_partition_spec
from ..core.meta import get_sharding as get_sharding
from ..core.meta import unbox as unbox
from ..core.meta import with_partitioning as with_partitioning

# ----------------------------------------------------------------------------- module API
# (owned by the Linen module helper: module.py, transforms.py)
from . import module as module

# ----------------------------------------------------------------------------- layers
# (owned by the layers helper: they add their names below)
from .activation import PReLU as PReLU
from .activation import celu as celu
from .activation import elu as elu
from .activation import gelu as gelu
from .activation import glu as glu
from .activation import hard_sigmoid as hard_sigmoid
from .activation import hard_silu as hard_silu
from .activation import hard_swish as hard_swish
from .activation import hard_tanh as hard_tanh
from .activation import leaky_relu as leaky_relu
from .activation import log_sigmoid as log_sigmoid
from .activation import log_softmax as log_softmax
from .activation import logsumexp as logsumexp
from .activation import normalize as normalize
from .activation import one_hot as one_hot
from .activation import relu as relu
from .activation import relu6 as relu6
from .activation import selu as selu
from .activation import sigmoid as sigmoid
from .activation import silu as silu
from .activation import soft_sign as soft_sign
from .activation import softmax as softmax
from .activation import softplus as softplus
from .activation import standardize as standardize
from .activation import swish as swish
from .activation import tanh as tanh
from .attention import MultiHeadAttention as MultiHeadAttention
from .attention import MultiHeadDotProductAttention as MultiHeadDotProductAttention
from .attention import SelfAttention as SelfAttention
from .attention import combine_masks as combine_masks
from .attention import dot_product_attention as dot_product_attention
from .attention import dot_product_attention_weights as dot_product_attention_weights
from .attention import make_attention_mask as make_attention_mask
from .attention import make_causal_mask as make_causal_mask
from .batch_apply import BatchApply as BatchApply
from .combinators import Sequential as Sequential
from .fp8_ops import Fp8DirectDotGeneralOp as Fp8DirectDotGeneralOp
from .fp8_ops import Fp8DotGeneral as Fp8DotGeneral
from .fp8_ops import Fp8DotGeneralOp as Fp8DotGeneralOp
from .fp8_ops import Fp8Einsum as Fp8Einsum
from .fp8_ops import NANOOFp8DotGeneralOp as NANOOFp8DotGeneralOp
from .initializers import ones as ones
from .initializers import ones_init as ones_init
from .initializers import zeros as zeros
from .initializers import zeros_init as zeros_init
from .linear import Conv as Conv
from .linear import ConvLocal as ConvLocal
from .linear import ConvTranspose as ConvTranspose
from .linear import Dense as Dense
from .linear import DenseGeneral as DenseGeneral
from .linear import Einsum as Einsum
from .linear import Embed as Embed
from .module import Module as Module
from .module import Variable as Variable
from .module import apply as apply
from .module import compact as compact
from .module import compact_name_scope as compact_name_scope
from .module import disable_named_call as disable_named_call
from .module import enable_named_call as enable_named_call
from .module import init as init
from .module import init_with_output as init_with_output
from .module import intercept_methods as intercept_methods
from .module import merge_param as merge_param
from .module import nowrap as nowrap
from .module import override_named_call as override_named_call
from .module import share_scope as share_scope
from .normalization import BatchNorm as BatchNorm
from .normalization import GroupNorm as GroupNorm
from .normalization import InstanceNorm as InstanceNorm
from .normalization import LayerNorm as LayerNorm
from .normalization import RMSNorm as RMSNorm
from .normalization import SpectralNorm as SpectralNorm
from .normalization import WeightNorm as WeightNorm
from .pooling import avg_pool as avg_pool
from .pooling import max_pool as max_pool
from .pooling import pool as pool
from .recurrent import RNN as RNN
from .recurrent import Bidirectional as Bidirectional
from .recurrent import ConvLSTMCell as ConvLSTMCell
from .recurrent import GRUCell as GRUCell
from .recurrent import LSTMCell as LSTMCell
from .recurrent import MGUCell as MGUCell
from .recurrent import OptimizedLSTMCell as OptimizedLSTMCell
from .recurrent import RNNCellBase as RNNCellBase
from .recurrent import SimpleCell as SimpleCell
from .spmd import LogicallyPartitioned as LogicallyPartitioned
from .spmd import get_logical_axis_rules as get_logical_axis_rules
from .spmd import logical_axis_rules as logical_axis_rules
from .spmd import logical_to_mesh as logical_to_mesh
from .spmd import logical_to_mesh_axes as logical_to_mesh_axes
from .spmd import logical_to_mesh_sharding as logical_to_mesh_sharding
from .spmd import set_logical_axis_rules as set_logical_axis_rules
from .spmd import with_logical_constraint as with_logical_constraint
from .spmd import with_logical_partitioning as with_logical_partitioning
from .stochastic import Dropout as Dropout
from .summary import tabulate as tabulate
from .transforms import add_metadata_axis as add_metadata_axis
from .transforms import checkpoint as checkpoint
from .transforms import cond as cond
from .transforms import custom_vjp as custom_vjp
from .transforms import fold_rngs as fold_rngs
from .transforms import grad as grad
from .transforms import jit as jit
from .transforms import jvp as jvp
from .transforms import map_variables as map_variables
from .transforms import named_call as named_call
from .transforms import remat as remat
from .transforms import remat_scan as remat_scan
from .transforms import scan as scan
from .transforms import switch as switch
from .transforms import value_and_grad as value_and_grad
from .transforms import vjp as vjp
from .transforms import vmap as vmap
from .transforms import while_loop as while_loop
# ----------------------------------------------------------------------------- end of layers
