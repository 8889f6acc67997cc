"""Initializers (``jax.nn.initializers``) and the Flax-published layer defaults.

>>> import jax
>>> from pytreemod.nn import initializers
>>> initializers.default_embed_init(jax.random.key(0), (10, 4)).shape
(10, 4)
"""

from ._init import Initializer as Initializer
from ._init import constant as constant
from ._init import default_bias_init as default_bias_init
from ._init import default_embed_init as default_embed_init
from ._init import default_kernel_init as default_kernel_init
from ._init import delta_orthogonal as delta_orthogonal
from ._init import glorot_normal as glorot_normal
from ._init import glorot_uniform as glorot_uniform
from ._init import he_normal as he_normal
from ._init import he_uniform as he_uniform
from ._init import kaiming_normal as kaiming_normal
from ._init import kaiming_uniform as kaiming_uniform
from ._init import lecun_normal as lecun_normal
from ._init import lecun_uniform as lecun_uniform
from ._init import normal as normal
from ._init import ones as ones
from ._init import orthogonal as orthogonal
from ._init import truncated_normal as truncated_normal
from ._init import uniform as uniform
from ._init import variance_scaling as variance_scaling
from ._init import xavier_normal as xavier_normal
from ._init import xavier_uniform as xavier_uniform
from ._init import zeros as zeros
