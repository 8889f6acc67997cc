"""NNX's ``eval_shape``: build a module abstractly (no FLOPs, no memory for its arrays)."""

from collections.abc import Callable
from typing import Any, TypeVar

import jax

from ..graphlib import merge, split
from ..statelib import State

T = TypeVar("T")


def eval_shape(f: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``f(*args, **kwargs)`` with every array replaced by a ``jax.ShapeDtypeStruct``.

    Modules and Variables in the arguments and the result are supported: the result's
    Variables hold ``ShapeDtypeStruct`` values. Changes ``f`` makes to the arguments (such as
    advancing an ``Rngs`` counter) are not kept.
    """
    in_graph, in_state = split((args, kwargs))
    out_graph: list[Any] = []

    def abstract(state: State) -> State:
        call_args, call_kwargs = merge(in_graph, state)
        out_def, out_state = split((f(*call_args, **call_kwargs),))
        out_graph.append(out_def)
        return out_state

    shapes = jax.eval_shape(abstract, in_state)
    return merge(out_graph[0], shapes)[0]
