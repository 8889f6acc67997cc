"""JAX transforms over modules: ``grad``, ``vmap``, ``scan``, ``remat``, ``cond``, ...

A module argument is just a PyTree, so ``vmap(f, in_axes=(1, 0))`` means what a JAX user
thinks (the JAX-style-transforms note). Finer control puts a lift type where JAX expects
an axis or an argnum:

- ``StateAxes({filter: axis_or_None})`` in ``vmap``/``scan`` axes maps each selected
  part of a module's state on its own axis (``scan`` also accepts ``Carry``);
- ``DiffState(argnum, filter)`` in ``grad``'s ``argnums`` differentiates only the
  selected state and returns the gradient as that state (a nested dict).

Every transform packs its inputs with ``_pack`` (non-arrays static, shared Variables one
value) and, where it adds or removes an axis of an axis-metadata box, calls
``pm.add_axis``/``pm.remove_axis`` (``_meta``) with the user's ``metadata_params``.

This module only re-exports; one module per concern, each importing only those above it
in this list: ``_transforms_axes`` (``Carry``, ``StateAxes``, resolving axis specs per
variable slot), ``_transforms_autodiff`` (``grad``, ``value_and_grad``, ``DiffState``),
``_transforms_map`` (``vmap``), ``_transforms_scan`` (``scan``), ``_transforms_control``
(``remat``/``checkpoint``, ``cond``, ``switch``, ``while_loop``, ``eval_shape``).
"""

from ._transforms_autodiff import DiffState as DiffState
from ._transforms_autodiff import grad as grad
from ._transforms_autodiff import value_and_grad as value_and_grad
from ._transforms_axes import Carry as Carry
from ._transforms_axes import StateAxes as StateAxes
from ._transforms_control import checkpoint as checkpoint
from ._transforms_control import cond as cond
from ._transforms_control import eval_shape as eval_shape
from ._transforms_control import remat as remat
from ._transforms_control import switch as switch
from ._transforms_control import while_loop as while_loop
from ._transforms_map import vmap as vmap
from ._transforms_scan import scan as scan
