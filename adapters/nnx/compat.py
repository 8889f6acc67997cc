"""``flax.nnx.compat``: NNX's APIs with graph mode (and graph updates) on by default.

``nnx.compat.split(model)`` is ``nnx.split(model, graph=True)``; ``nnx.compat.jit(f)`` is
``nnx.jit(f, graph=True, graph_updates=True)``, and so on for the graph functions, the
module helpers, the RNG helpers and every transform. Programs written for the graph-mode
NNX keep their behaviour whatever ``nnx.set_graph_mode`` says.
"""

import functools
from types import ModuleType
from typing import Any

from . import graphlib, module, rnglib, spmd
from .transforms import _shard_map, autodiff, compilation, iteration, transforms

# (source module, name, defaults); looked up when first used, so a name the source
# module does not define (yet) is simply missing here too.
_GRAPH = {"graph": True}
_UPDATES = {"graph": True, "graph_updates": True}
_TABLE: tuple[tuple[ModuleType, str, dict[str, bool]], ...] = (
    (graphlib, "split", _GRAPH),
    (graphlib, "state", _GRAPH),
    (graphlib, "clone", _GRAPH),
    (graphlib, "graphdef", _GRAPH),
    (graphlib, "flatten", _GRAPH),
    (graphlib, "iter_graph", _GRAPH),
    (graphlib, "recursive_map", _GRAPH),
    (graphlib, "cached_partial", _UPDATES),
    (module, "view", _GRAPH),
    (module, "view_info", _GRAPH),
    (module, "iter_modules", _GRAPH),
    (module, "iter_children", _GRAPH),
    (rnglib, "split_rngs", _UPDATES),
    (rnglib, "fork_rngs", _UPDATES),
    (rnglib, "reseed", _GRAPH),
    (rnglib, "backup_keys", _GRAPH),
    (compilation, "jit", _UPDATES),
    (_shard_map, "shard_map", _UPDATES),
    (autodiff, "grad", _UPDATES),
    (autodiff, "value_and_grad", _UPDATES),
    (autodiff, "custom_vjp", _UPDATES),
    (autodiff, "vjp", _UPDATES),
    (autodiff, "jvp", _UPDATES),
    (autodiff, "remat", _UPDATES),
    (iteration, "vmap", _UPDATES),
    (iteration, "scan", _UPDATES),
    (iteration, "pmap", _UPDATES),
    (iteration, "while_loop", _UPDATES),
    (iteration, "fori_loop", _UPDATES),
    (transforms, "eval_shape", _UPDATES),
    (transforms, "cond", _UPDATES),
    (transforms, "switch", _UPDATES),
    (transforms, "checkify", _UPDATES),
    (spmd, "get_abstract_model", _GRAPH),
)


def _graph_default(source: ModuleType, name: str, defaults: dict[str, bool]) -> Any:
    """``source.<name>`` with ``defaults`` bound, or None if absent."""
    fn = getattr(source, name, None)
    return None if fn is None else functools.partial(fn, **defaults)


def __getattr__(name: str) -> Any:
    for source, fn_name, defaults in _TABLE:
        if fn_name == name:
            fn = _graph_default(source, fn_name, defaults)
            if fn is not None:
                globals()[name] = fn
                return fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({name for _, name, _ in _TABLE} | set(globals()))
