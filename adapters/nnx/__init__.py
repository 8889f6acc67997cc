"""adapters.nnx: ``flax.nnx`` rebuilt on pytreemod.

Code written against ``flax.nnx`` (Flax 0.12.8) runs after changing ``flax`` to
``adapters`` in its imports. NNX Variables are pytreemod Variables in the same collections,
NNX filters are pytreemod filters (a string reads as a tag, as in Flax), and the layers'
math is ``pytreemod.nn.functional``. NNX's transforms lift the object graph by its
split/merge around a transform of its state; for now that transform is JAX's own
(docs/nnx.md says where pytreemod's differ from Flax's semantics). See docs/nnx.md.

The module layout is Flax's (``graphlib``, ``variablelib``, ``statelib``, ``rnglib``,
``nn.linear``...), so code that imports those submodules finds them here.
"""

from adapters.core.spmd import logical_axis_rules as logical_axis_rules
from adapters.linen.pooling import avg_pool as avg_pool
from adapters.linen.pooling import max_pool as max_pool
from adapters.linen.pooling import min_pool as min_pool
from adapters.linen.pooling import pool as pool

from . import bridge as bridge
from . import compat as compat
from . import extract as extract
from . import filterlib as filterlib
from . import graph as graph
from . import graphlib as graphlib
from . import helpers as helpers
from . import ids as ids
from . import module as module
from . import pytreelib as object  # noqa: F401 (Flax's alias: nnx.object is pytreelib)
from . import pytreelib as pytreelib
from . import reprlib as reprlib
from . import rnglib as rnglib
from . import spmd as spmd
from . import statelib as statelib
from . import tracers as tracers
from . import traversals as traversals
from . import variablelib as variablelib
from .bridge import wrappers as wrappers
from .extract import NodeStates as NodeStates
from .extract import from_tree as from_tree
from .extract import prefix as prefix
from .extract import to_tree as to_tree
from .filterlib import All as All
from .filterlib import Any as Any
from .filterlib import Everything as Everything
from .filterlib import Not as Not
from .filterlib import Nothing as Nothing
from .filterlib import OfType as OfType
from .filterlib import PathContains as PathContains
from .filterlib import WithTag as WithTag
from .graphlib import FlatState as FlatState
from .graphlib import GraphDef as GraphDef
from .graphlib import GraphState as GraphState
from .graphlib import MergeContext as MergeContext
from .graphlib import PureState as PureState
from .graphlib import SplitContext as SplitContext
from .graphlib import UpdateContext as UpdateContext
from .graphlib import as_pure as as_pure
from .graphlib import cached_partial as cached_partial
from .graphlib import call as call
from .graphlib import clone as clone
from .graphlib import current_update_context as current_update_context
from .graphlib import find_duplicates as find_duplicates
from .graphlib import flatten as flatten
from .graphlib import graphdef as graphdef
from .graphlib import iter_children as iter_children
from .graphlib import iter_graph as iter_graph
from .graphlib import iter_module_children as iter_module_children
from .graphlib import map as map
from .graphlib import merge as merge
from .graphlib import merge_context as merge_context
from .graphlib import pop as pop
from .graphlib import pure as pure
from .graphlib import recursive_map as recursive_map
from .graphlib import set_graph_mode as set_graph_mode
from .graphlib import set_graph_updates as set_graph_updates
from .graphlib import set_metadata as set_metadata
from .graphlib import split as split
from .graphlib import split_context as split_context
from .graphlib import state as state
from .graphlib import unflatten as unflatten
from .graphlib import unpack as unpack
from .graphlib import update as update
from .graphlib import update_context as update_context
from .graphlib import variables as variables
from .graphlib import vars_as as vars_as
from .graphlib import with_vars as with_vars
from .helpers import Dict as Dict
from .helpers import List as List
from .helpers import Sequential as Sequential
from .helpers import TrainState as TrainState
from .module import M as M
from .module import Module as Module
from .module import capture as capture
from .module import iter_modules as iter_modules
from .module import view as view
from .module import view_info as view_info
from .module import with_attributes as with_attributes
from .nn import initializers as initializers
from .nn.activations import PReLU as PReLU
from .nn.activations import celu as celu
from .nn.activations import elu as elu
from .nn.activations import gelu as gelu
from .nn.activations import glu as glu
from .nn.activations import hard_sigmoid as hard_sigmoid
from .nn.activations import hard_silu as hard_silu
from .nn.activations import hard_swish as hard_swish
from .nn.activations import hard_tanh as hard_tanh
from .nn.activations import identity as identity
from .nn.activations import leaky_relu as leaky_relu
from .nn.activations import log_sigmoid as log_sigmoid
from .nn.activations import log_softmax as log_softmax
from .nn.activations import logsumexp as logsumexp
from .nn.activations import one_hot as one_hot
from .nn.activations import relu as relu
from .nn.activations import relu6 as relu6
from .nn.activations import selu as selu
from .nn.activations import sigmoid as sigmoid
from .nn.activations import silu as silu
from .nn.activations import soft_sign as soft_sign
from .nn.activations import softmax as softmax
from .nn.activations import softplus as softplus
from .nn.activations import standardize as standardize
from .nn.activations import swish as swish
from .nn.activations import tanh as tanh
from .nn.attention import MultiHeadAttention as MultiHeadAttention
from .nn.attention import combine_masks as combine_masks
from .nn.attention import dot_product_attention as dot_product_attention
from .nn.attention import make_attention_mask as make_attention_mask
from .nn.attention import make_causal_mask as make_causal_mask
from .nn.initializers import Initializer as Initializer
from .nn.linear import Conv as Conv
from .nn.linear import ConvTranspose as ConvTranspose
from .nn.linear import Einsum as Einsum
from .nn.linear import Embed as Embed
from .nn.linear import Linear as Linear
from .nn.linear import LinearGeneral as LinearGeneral
from .nn.lora import LoRA as LoRA
from .nn.lora import LoRALinear as LoRALinear
from .nn.lora import LoRAParam as LoRAParam
from .nn.normalization import BatchNorm as BatchNorm
from .nn.normalization import GroupNorm as GroupNorm
from .nn.normalization import InstanceNorm as InstanceNorm
from .nn.normalization import LayerNorm as LayerNorm
from .nn.normalization import RMSNorm as RMSNorm
from .nn.normalization import SpectralNorm as SpectralNorm
from .nn.normalization import WeightNorm as WeightNorm
from .nn.recurrent import RNN as RNN
from .nn.recurrent import Bidirectional as Bidirectional
from .nn.recurrent import GRUCell as GRUCell
from .nn.recurrent import LSTMCell as LSTMCell
from .nn.recurrent import OptimizedLSTMCell as OptimizedLSTMCell
from .nn.recurrent import RNNCellBase as RNNCellBase
from .nn.recurrent import SimpleCell as SimpleCell
from .nn.stochastic import Dropout as Dropout
from .pytreelib import Data as Data
from .pytreelib import Object as Object
from .pytreelib import Pytree as Pytree
from .pytreelib import Static as Static
from .pytreelib import check_pytree as check_pytree
from .pytreelib import data as data
from .pytreelib import dataclass as dataclass
from .pytreelib import has_data as has_data
from .pytreelib import is_data as is_data
from .pytreelib import register_data_type as register_data_type
from .pytreelib import static as static
from .rnglib import RngCount as RngCount
from .rnglib import RngKey as RngKey
from .rnglib import Rngs as Rngs
from .rnglib import RngState as RngState
from .rnglib import RngStream as RngStream
from .rnglib import fork_rngs as fork_rngs
from .rnglib import reseed as reseed
from .rnglib import restore_rngs as restore_rngs
from .rnglib import split_rngs as split_rngs
from .rnglib import with_rngs as with_rngs
from .spmd import PARTITION_NAME as PARTITION_NAME
from .spmd import abstract_with_sharding as abstract_with_sharding
from .spmd import as_abstract as as_abstract
from .spmd import get_abstract_model as get_abstract_model
from .spmd import get_named_sharding as get_named_sharding
from .spmd import get_partition_spec as get_partition_spec
from .spmd import with_partitioning as with_partitioning
from .statelib import State as State
from .statelib import filter_state as filter_state
from .statelib import from_flat_state as from_flat_state
from .statelib import map_state as map_state
from .statelib import merge_state as merge_state
from .statelib import replace_by_pure_dict as replace_by_pure_dict
from .statelib import restore_int_paths as restore_int_paths
from .statelib import split_state as split_state
from .statelib import to_flat_state as to_flat_state
from .statelib import to_pure_dict as to_pure_dict
from .summary import tabulate as tabulate
from .training import metrics as metrics
from .training import optimizer as optimizer
from .training.ema import EMA as EMA
from .training.metrics import Metric as Metric
from .training.metrics import MultiMetric as MultiMetric
from .training.optimizer import ModelAndOptimizer as ModelAndOptimizer
from .training.optimizer import OptArray as OptArray
from .training.optimizer import Optimizer as Optimizer
from .training.optimizer import OptState as OptState
from .training.optimizer import OptVariable as OptVariable
from .transforms._shard_map import shard_map as shard_map
from .transforms.autodiff import DiffState as DiffState
from .transforms.autodiff import custom_vjp as custom_vjp
from .transforms.autodiff import grad as grad
from .transforms.autodiff import jvp as jvp
from .transforms.autodiff import remat as remat
from .transforms.autodiff import value_and_grad as value_and_grad
from .transforms.autodiff import vjp as vjp
from .transforms.compilation import StateSharding as StateSharding
from .transforms.compilation import jit as jit
from .transforms.compilation import jit_partial as jit_partial
from .transforms.iteration import Carry as Carry
from .transforms.iteration import StateAxes as StateAxes
from .transforms.iteration import fori_loop as fori_loop
from .transforms.iteration import pmap as pmap
from .transforms.iteration import scan as scan
from .transforms.iteration import transform_metadata as transform_metadata
from .transforms.iteration import vmap as vmap
from .transforms.iteration import while_loop as while_loop
from .transforms.transforms import checkify as checkify
from .transforms.transforms import cond as cond
from .transforms.transforms import eval_shape as eval_shape
from .transforms.transforms import make_jaxpr as make_jaxpr
from .transforms.transforms import switch as switch
from .variablelib import A as A
from .variablelib import BatchStat as BatchStat
from .variablelib import Cache as Cache
from .variablelib import Intermediate as Intermediate
from .variablelib import Param as Param
from .variablelib import Perturbation as Perturbation
from .variablelib import Variable as Variable
from .variablelib import VariableMetadata as VariableMetadata
from .variablelib import register_variable_name as register_variable_name
from .variablelib import use_eager_sharding as use_eager_sharding
from .variablelib import using_eager_sharding as using_eager_sharding
from .variablelib import var_defaults as var_defaults
from .variablelib import variable_name_from_type as variable_name_from_type
from .variablelib import variable_type_from_name as variable_type_from_name
from .variablelib import with_metadata as with_metadata
from .visualization import display as display


def __getattr__(name: str) -> "type[Variable]":
    # Flax's deprecated alias; any other unknown name is an AttributeError.
    if name == "VariableState":
        import warnings

        warnings.warn(
            "'VariableState' was removed, this is just an alias to 'Variable'. "
            "Plase use 'Variable' directly instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return Variable
    raise AttributeError(f"Module {__name__} has no attribute '{name}'")
