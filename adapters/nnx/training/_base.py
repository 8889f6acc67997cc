"""What the training objects share: their base class and the state helpers.

``Optimizer``, ``EMA`` and the metrics are NNX Pytrees (graph nodes that are not Modules);
their array state is read from a model with ``graphlib.state`` and handed to optax as plain
arrays (``as_pure``).
"""

from typing import Any

import jax

from .. import graphlib
from ..variablelib import Variable

# ``pytreelib.Pytree``/``data`` are Flax's names for the non-Module graph node and the
# data marker; until pytreelib provides them, Module and its ``data`` take their place.
try:
    from ..pytreelib import Pytree as Pytree
    from ..pytreelib import data as _data
except ImportError:
    from ..module import Module as Pytree  # type: ignore[assignment]
    from ..module import data as _data


def as_data(value: Any) -> Any:
    """``value`` marked as pytree data for the attribute it is assigned to."""
    return _data(value)


def as_pure(tree: Any) -> Any:
    """``tree`` with every Variable replaced by its value (``nnx.as_pure``)."""
    return jax.tree.map(
        lambda x: x.get_value() if isinstance(x, Variable) else x,
        tree,
        is_leaf=lambda x: isinstance(x, Variable),
    )


def filtered_state(node: Any, only: Any, graph: bool | None) -> Any:
    """``nnx.state(node, only)``, in graph or tree mode as ``graph`` says (``None``: the
    current mode)."""
    if graph is None:
        return graphlib.state(node, only)
    return graphlib.state(node, only, graph=graph)
