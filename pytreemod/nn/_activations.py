"""Activation functions: ``jax.nn``'s, re-exported so models need one import.

JAX compiles most of them with ``jax.jit``, whose trace cache already traces each one once
per input shape; those are re-exported as they are. The five it does not (``gelu``,
``relu``, ``relu6``, ``softmax``, ``logsumexp``: plain Python or ``custom_jvp``, traced
again at every call) wear ``pm.trace_once``, as ``pm.nn``'s layers do: under a trace each
distinct call is traced once and replayed as a nested ``jit`` equation, which XLA inlines.
Eager calls run JAX's function as written, so results are bit-identical; the wrapped
function is ``__wrapped__``.
"""

import jax
from jax.nn import celu as celu
from jax.nn import elu as elu
from jax.nn import glu as glu
from jax.nn import hard_sigmoid as hard_sigmoid
from jax.nn import hard_silu as hard_silu
from jax.nn import hard_swish as hard_swish
from jax.nn import hard_tanh as hard_tanh
from jax.nn import leaky_relu as leaky_relu
from jax.nn import log_sigmoid as log_sigmoid
from jax.nn import log_softmax as log_softmax
from jax.nn import one_hot as one_hot
from jax.nn import selu as selu
from jax.nn import sigmoid as sigmoid
from jax.nn import silu as silu
from jax.nn import soft_sign as soft_sign
from jax.nn import softplus as softplus
from jax.nn import standardize as standardize
from jax.nn import swish as swish
from jax.numpy import tanh as tanh

from .._trace_cache import trace_once

gelu = trace_once(jax.nn.gelu)
relu = trace_once(jax.nn.relu)
relu6 = trace_once(jax.nn.relu6)
softmax = trace_once(jax.nn.softmax)
logsumexp = trace_once(jax.nn.logsumexp)
