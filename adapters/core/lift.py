"""``adapters.core.lift``: ``pack`` and the lifted transforms (``flax.core.lift``'s names)."""

from typing import Any

import jax

from ._lift import pack as pack
from ._lifted import checkpoint as checkpoint
from ._lifted import fold_rngs as fold_rngs
from ._lifted import jit as jit
from ._lifted import map_variables as map_variables
from ._lifted import remat as remat
from ._lifted import swap_collection as swap_collection
from ._lifted_autodiff import custom_vjp as custom_vjp
from ._lifted_autodiff import jvp as jvp
from ._lifted_autodiff import value_and_grad as value_and_grad
from ._lifted_autodiff import vjp as vjp
from ._lifted_axes import In as In
from ._lifted_axes import Out as Out
from ._lifted_axes import broadcast as broadcast
from ._lifted_control import cond as cond
from ._lifted_control import switch as switch
from ._lifted_control import while_loop as while_loop
from ._lifted_scan import remat_scan as remat_scan
from ._lifted_scan import scan as scan
from ._lifted_vmap import vmap as vmap


def tree_map_rngs(fn: Any, tree: Any) -> Any:
    """``jax.tree.map(fn, tree)`` with typed PRNG key arrays as leaves (for ``random.*``)."""
    return jax.tree.map(
        fn,
        tree,
        is_leaf=lambda x: (
            hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        ),
    )


__all__ = [
    "In",
    "Out",
    "broadcast",
    "checkpoint",
    "cond",
    "custom_vjp",
    "fold_rngs",
    "jit",
    "jvp",
    "map_variables",
    "pack",
    "remat",
    "remat_scan",
    "scan",
    "swap_collection",
    "switch",
    "tree_map_rngs",
    "value_and_grad",
    "vjp",
    "vmap",
    "while_loop",
]
