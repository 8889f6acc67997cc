"""Layers: ``Linear``, ``Conv``, ``Embedding``, norms, ``Dropout``, attention, pooling,
recurrent cells and ``RNN``.

Every layer is a ``pytreemod.Module`` declared with ``typecheck=True``: its array
arguments carry jaxtyping annotations checked (with beartype) when the layer is called or
traced, never inside a compiled step. The math lives in ``pytreemod.nn.functional``;
initializers and Flax's default choices in ``pytreemod.nn.initializers``. Parameter names
and shapes are Flax Linen's (``kernel`` ``(in, out)``, conv ``kernel`` ``(*window, in,
out)``, ``embedding``, ``scale``/``bias``, ``mean``/``var``).

>>> import jax, jax.numpy as jnp
>>> import pytreemod as pm
>>> layer = pm.nn.Linear(3, 4, key=jax.random.key(0))
>>> layer(jnp.ones((2, 3))).shape
(2, 4)
"""

from .._shapecheck import AnyArray as AnyArray
from . import functional as functional
from . import initializers as initializers
from ._activations import celu as celu
from ._activations import elu as elu
from ._activations import gelu as gelu
from ._activations import glu as glu
from ._activations import hard_sigmoid as hard_sigmoid
from ._activations import hard_silu as hard_silu
from ._activations import hard_swish as hard_swish
from ._activations import hard_tanh as hard_tanh
from ._activations import leaky_relu as leaky_relu
from ._activations import log_sigmoid as log_sigmoid
from ._activations import log_softmax as log_softmax
from ._activations import logsumexp as logsumexp
from ._activations import one_hot as one_hot
from ._activations import relu as relu
from ._activations import relu6 as relu6
from ._activations import selu as selu
from ._activations import sigmoid as sigmoid
from ._activations import silu as silu
from ._activations import soft_sign as soft_sign
from ._activations import softmax as softmax
from ._activations import softplus as softplus
from ._activations import standardize as standardize
from ._activations import swish as swish
from ._activations import tanh as tanh
from ._attention import MergeHeads as MergeHeads
from ._attention import MultiHeadAttention as MultiHeadAttention
from ._attention import ProjectHeads as ProjectHeads
from ._conv import Conv as Conv
from ._conv import Conv1d as Conv1d
from ._conv import Conv2d as Conv2d
from ._conv import Conv3d as Conv3d
from ._conv import ConvOptions as ConvOptions
from ._conv import ConvTranspose as ConvTranspose
from ._conv import ConvTranspose1d as ConvTranspose1d
from ._conv import ConvTranspose2d as ConvTranspose2d
from ._conv import ConvTranspose3d as ConvTranspose3d
from ._conv import ConvTransposeOptions as ConvTransposeOptions
from ._dropout import Dropout as Dropout
from ._embedding import Embedding as Embedding
from ._linear import MLP as MLP
from ._linear import Identity as Identity
from ._linear import Linear as Linear
from ._normalization import BatchNorm as BatchNorm
from ._normalization import GroupNorm as GroupNorm
from ._normalization import LayerNorm as LayerNorm
from ._normalization import RMSNorm as RMSNorm
from ._ops_attention import combine_masks as combine_masks
from ._ops_attention import make_attention_mask as make_attention_mask
from ._ops_attention import make_causal_mask as make_causal_mask
from ._ops_pool import avg_pool as avg_pool
from ._ops_pool import max_pool as max_pool
from ._ops_pool import min_pool as min_pool
from ._pooling import AvgPool as AvgPool
from ._pooling import MaxPool as MaxPool
from ._pooling import MinPool as MinPool
from ._recurrent import ConvLSTMCell as ConvLSTMCell
from ._recurrent import GRUCell as GRUCell
from ._recurrent import LSTMCell as LSTMCell
from ._recurrent import MGUCell as MGUCell
from ._recurrent import OptimizedLSTMCell as OptimizedLSTMCell
from ._recurrent import RNNCellBase as RNNCellBase
from ._recurrent import SimpleCell as SimpleCell
from ._rnn import RNN as RNN
from ._rnn import Bidirectional as Bidirectional
from ._sequential import Lambda as Lambda
from ._sequential import Sequential as Sequential

__all__ = [
    "AnyArray",
    "AvgPool",
    "BatchNorm",
    "Bidirectional",
    "Conv",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvLSTMCell",
    "ConvOptions",
    "ConvTranspose",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "ConvTransposeOptions",
    "Dropout",
    "Embedding",
    "GRUCell",
    "GroupNorm",
    "Identity",
    "LSTMCell",
    "Lambda",
    "LayerNorm",
    "Linear",
    "MGUCell",
    "MLP",
    "MaxPool",
    "MergeHeads",
    "MinPool",
    "MultiHeadAttention",
    "OptimizedLSTMCell",
    "ProjectHeads",
    "RMSNorm",
    "RNN",
    "RNNCellBase",
    "Sequential",
    "SimpleCell",
    "avg_pool",
    "celu",
    "combine_masks",
    "elu",
    "functional",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "initializers",
    "leaky_relu",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "make_attention_mask",
    "make_causal_mask",
    "max_pool",
    "min_pool",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "standardize",
    "swish",
    "tanh",
]
