"""``adapters.core.nn``: functional-core layers, each a function of a ``Scope``.

The names of ``flax.core.nn``: ``dense``, ``dense_general``, ``conv``, ``conv_transpose``,
``embedding``, ``batch_norm``, ``layer_norm``, ``group_norm``, ``dropout``,
``dot_product_attention``, ``multi_head_dot_product_attention``, pooling, activations and
``initializers``.
"""

from . import activation as activation
from . import attention as attention
from . import initializers as initializers
from . import linear as linear
from . import normalization as normalization
from . import pooling as pooling
from . import stochastic as stochastic
from ._attention import dot_product_attention as dot_product_attention
from ._attention import multi_head_dot_product_attention as multi_head_dot_product_attention
from ._linear import Embedding as Embedding
from ._linear import conv as conv
from ._linear import conv_transpose as conv_transpose
from ._linear import dense as dense
from ._linear import dense_general as dense_general
from ._linear import embedding as embedding
from ._normalization import batch_norm as batch_norm
from ._normalization import group_norm as group_norm
from ._normalization import layer_norm as layer_norm
from ._stochastic import dropout as dropout
from .activation import celu as celu
from .activation import elu as elu
from .activation import gelu as gelu
from .activation import glu as glu
from .activation import leaky_relu as leaky_relu
from .activation import log_sigmoid as log_sigmoid
from .activation import log_softmax as log_softmax
from .activation import relu as relu
from .activation import sigmoid as sigmoid
from .activation import silu as silu
from .activation import soft_sign as soft_sign
from .activation import softmax as softmax
from .activation import softplus as softplus
from .activation import swish as swish
from .activation import tanh as tanh
from .pooling import avg_pool as avg_pool
from .pooling import max_pool as max_pool
from .pooling import min_pool as min_pool
from .pooling import pool as pool
