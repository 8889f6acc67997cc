"""The math of every layer, as pure functions on arrays.

Layers in ``pytreemod.nn`` (and the adapters' Linen layers) call these; no layer's math is
written anywhere else. Each op checks its jaxtyping annotations at trace time (free once
compiled) and reports a mismatch as ``pytreemod.ShapeError``.

>>> import jax.numpy as jnp
>>> from pytreemod.nn import functional as F
>>> F.linear(jnp.ones((2, 3)), jnp.ones((3, 4))).shape
(2, 4)
"""

from ._ops_attention import combine_masks as combine_masks
from ._ops_attention import dot_product_attention as dot_product_attention
from ._ops_attention import dot_product_attention_weights as dot_product_attention_weights
from ._ops_attention import make_attention_mask as make_attention_mask
from ._ops_attention import make_causal_mask as make_causal_mask
from ._ops_attention import update_kv_cache as update_kv_cache
from ._ops_common import promote_dtype as promote_dtype
from ._ops_conv import PaddingLike as PaddingLike
from ._ops_conv import canonicalize_padding as canonicalize_padding
from ._ops_conv import conv as conv
from ._ops_conv import conv_local as conv_local
from ._ops_conv import conv_local_shapes as conv_local_shapes
from ._ops_conv import conv_transpose as conv_transpose
from ._ops_dropout import dropout as dropout
from ._ops_linear import DotGeneral as DotGeneral
from ._ops_linear import attend as attend
from ._ops_linear import dense_general as dense_general
from ._ops_linear import einsum_bias_shape as einsum_bias_shape
from ._ops_linear import einsum_dense as einsum_dense
from ._ops_linear import embed as embed
from ._ops_linear import linear as linear
from ._ops_linear import merge_heads as merge_heads
from ._ops_linear import project_heads as project_heads
from ._ops_loss import (
    softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,
)
from ._ops_norm import batch_norm as batch_norm
from ._ops_norm import batch_stats as batch_stats
from ._ops_norm import compute_stats as compute_stats
from ._ops_norm import ema as ema
from ._ops_norm import group_norm as group_norm
from ._ops_norm import l2_normalize as l2_normalize
from ._ops_norm import layer_norm as layer_norm
from ._ops_norm import normalize as normalize
from ._ops_norm import rms_norm as rms_norm
from ._ops_norm import spectral_power_iteration as spectral_power_iteration
from ._ops_pool import avg_pool as avg_pool
from ._ops_pool import max_pool as max_pool
from ._ops_pool import min_pool as min_pool
from ._ops_pool import pool as pool
from ._ops_recurrent import Projection as Projection
from ._ops_recurrent import ScanFn as ScanFn
from ._ops_recurrent import bidirectional as bidirectional
from ._ops_recurrent import conv_lstm_cell as conv_lstm_cell
from ._ops_recurrent import dense_projections as dense_projections
from ._ops_recurrent import flip_sequences as flip_sequences
from ._ops_recurrent import fused_lstm_cell as fused_lstm_cell
from ._ops_recurrent import gru_cell as gru_cell
from ._ops_recurrent import lstm_cell as lstm_cell
from ._ops_recurrent import mgu_cell as mgu_cell
from ._ops_recurrent import rnn as rnn
from ._ops_recurrent import select_last_carry as select_last_carry
from ._ops_recurrent import simple_cell as simple_cell

__all__ = [
    "DotGeneral",
    "PaddingLike",
    "Projection",
    "ScanFn",
    "attend",
    "avg_pool",
    "batch_norm",
    "batch_stats",
    "bidirectional",
    "canonicalize_padding",
    "combine_masks",
    "compute_stats",
    "conv",
    "conv_local",
    "conv_local_shapes",
    "conv_lstm_cell",
    "conv_transpose",
    "dense_general",
    "dense_projections",
    "dot_product_attention",
    "dot_product_attention_weights",
    "dropout",
    "einsum_bias_shape",
    "einsum_dense",
    "ema",
    "embed",
    "flip_sequences",
    "fused_lstm_cell",
    "group_norm",
    "gru_cell",
    "layer_norm",
    "linear",
    "lstm_cell",
    "make_attention_mask",
    "make_causal_mask",
    "max_pool",
    "merge_heads",
    "mgu_cell",
    "min_pool",
    "normalize",
    "pool",
    "project_heads",
    "promote_dtype",
    "rms_norm",
    "rnn",
    "select_last_carry",
    "simple_cell",
    "softmax_cross_entropy_with_integer_labels",
    "update_kv_cache",
]
