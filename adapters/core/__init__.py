"""adapters.core: Flax's functional core (``flax.core``) rebuilt over pytreemod.

Code written against ``flax.core`` runs by importing ``adapters.core`` instead: ``Scope``,
``init``/``apply``/``lazy_init``/``bind``, the dict helpers, ``lift`` (``pack`` and the
lifted transforms), ``meta`` (pytreemod's axis-metadata boxes) and ``nn`` (functional
layers). Filters (``DenyList``...) and boxes are pytreemod's; every lifted transform is
``lift.pack`` plus a pytreemod transform. This file only re-exports.
"""

from jax import Array as Array

from . import axes_scan as axes_scan
from . import errors as errors
from . import frozen_dict as frozen_dict
from . import lift as lift
from . import meta as meta
from . import nn as nn
from . import partial_eval as partial_eval
from . import scope as scope
from . import spmd as spmd
from . import tracers as tracers
from . import variables as variables
from ._apply import apply as apply
from ._apply import bind as bind
from ._apply import init as init
from ._apply import lazy_init as lazy_init
from ._frozen_dict import FrozenDict as FrozenDict
from ._frozen_dict import copy as copy
from ._frozen_dict import freeze as freeze
from ._frozen_dict import pop as pop
from ._frozen_dict import pretty_repr as pretty_repr
from ._frozen_dict import unfreeze as unfreeze
from ._lifted import checkpoint as checkpoint
from ._lifted import jit as jit
from ._lifted import remat as remat
from ._lifted_autodiff import custom_vjp as custom_vjp
from ._lifted_autodiff import jvp as jvp
from ._lifted_autodiff import vjp as vjp
from ._lifted_axes import broadcast as broadcast
from ._lifted_control import while_loop as while_loop
from ._lifted_scan import remat_scan as remat_scan
from ._lifted_scan import scan as scan
from ._lifted_vmap import vmap as vmap
from ._scope import DenyList as DenyList
from ._scope import LazyRng as LazyRng
from ._scope import Scope as Scope
from ._scope import Variable as Variable
from .meta import AxisMetadata as AxisMetadata
from .meta import map_axis_meta as map_axis_meta
from .meta import unbox as unbox
from .tracers import check_trace_level as check_trace_level
from .tracers import current_trace as current_trace

__all__ = [
    "Array",
    "AxisMetadata",
    "DenyList",
    "FrozenDict",
    "LazyRng",
    "Scope",
    "Variable",
    "apply",
    "bind",
    "broadcast",
    "check_trace_level",
    "checkpoint",
    "copy",
    "current_trace",
    "custom_vjp",
    "errors",
    "freeze",
    "init",
    "jit",
    "jvp",
    "lazy_init",
    "lift",
    "map_axis_meta",
    "meta",
    "nn",
    "pop",
    "pretty_repr",
    "remat",
    "remat_scan",
    "scan",
    "unbox",
    "unfreeze",
    "vjp",
    "vmap",
    "while_loop",
]
